import { readFileSync } from 'node:fs';
import vm from 'node:vm';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The workflow sandbox's stack formatter (workflows/stack-traces.ts), evaluated as the worker
 * does: in a V8 context of its own, from a file standing for the workflow bundle, before any
 * error is made there.
 */
const BUNDLE = '/srv/workflow-bundle-0123abcd.js';
const source = ts.transpileModule(readFileSync(new URL('../../workflows/stack-traces.ts', import.meta.url), 'utf8'), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022 },
}).outputText;

function sandbox() {
  const context = vm.createContext({ exports: {} });
  vm.runInContext(source, context, { filename: BUNDLE });
  return {
    run: (code: string) => vm.runInContext(code, context, { filename: BUNDLE }) as unknown,
    SandboxError: vm.runInContext('Error', context) as ErrorConstructor,
  };
}

describe("the workflow sandbox's stack formatter", () => {
  it("formats an error made by the bundle's code as V8 does: each frame's function and its position in the bundle", () => {
    const { run } = sandbox();
    const stack = run(`function refuse() { return new TypeError('refused'); } function caller() { return refuse(); } caller().stack`);
    expect(stack).toMatch(
      /^TypeError: refused\n {4}at refuse \(\/srv\/workflow-bundle-0123abcd\.js:1:28\)\n {4}at caller \(\/srv\/workflow-bundle-0123abcd\.js:1:83\)\n/,
    );
  });

  it('keeps the stack of an error a builtin throws (its first frame has no file)', () => {
    const { run } = sandbox();
    const stack = run(`function parse() { try { JSON.parse('{'); } catch (e) { return e.stack; } } parse()`) as string;
    expect(stack).toMatch(/^SyntaxError: .+\n {4}at JSON\.parse \(<anonymous>\)\n {4}at parse \(\/srv\/workflow-bundle-0123abcd\.js:1:\d+\)/);
  });

  it("gives no stack to an error made by code outside the bundle, as the Temporal SDK's promise hook makes one for every promise", () => {
    const { SandboxError } = sandbox();
    const made = (function hook() {
      return new SandboxError();
    })();
    expect(made.stack).toBe('');
  });

  it("leaves errors of the realm outside the sandbox to that realm's formatting", () => {
    sandbox();
    expect(new Error('outside').stack).toMatch(/^Error: outside\n {4}at /);
  });
});
