// Every workflow type the worker registers. Deterministic code only: see workflows/README.md.
export {};
