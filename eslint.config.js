// Lint configuration (`npm run lint`; CI runs it, and test/determinism.test.ts runs the workflows/
// rules in the suite). typescript-eslint's recommended rules, without type information (fast),
// one rule set that keeps workflows/ deterministic, and a limit of 60 lines per function.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/**
 * What Temporal workflow code may import: @temporalio/workflow, sibling workflow files, and the
 * activities' types (erased at build time). Anything with I/O or nondeterminism is refused:
 * Node built-ins, the service's own src/, the ORM, Koa, pg, the other Temporal SDK packages. The
 * rule covers `import` and `export ... from`; dynamic `import()` and `require` are refused below.
 */
export const workflowImportRules = {
  'no-restricted-imports': [
    'error',
    {
      patterns: [
        { regex: '^node:', message: 'workflows/ is deterministic: no Node built-ins (use an activity).' },
        {
          regex: '^(fs|path|os|crypto|http|https|net|tls|dns|child_process|worker_threads|stream|timers|url|util|zlib|events|buffer|process)(/.*)?$',
          message: 'workflows/ is deterministic: no Node built-ins (use an activity).',
        },
        { regex: '(^|/)src(/|$)', message: 'workflows/ imports nothing from src/: shared types and constants belong in workflows/defs.ts.' },
        {
          regex: '^(@mikro-orm/|koa$|@koa/|pg$|pino$|@temporalio/(client|worker|activity|testing)$)',
          message: 'workflows/ is deterministic: only @temporalio/workflow.',
        },
        { regex: '^\\.\\./activities/', allowTypeImports: true, message: 'workflows/ may import the activities’ types only (import type).' },
      ],
    },
  ],
  'no-restricted-syntax': [
    'error',
    { selector: 'ImportExpression', message: 'workflows/ is deterministic: no dynamic import().' },
    { selector: "CallExpression[callee.name='require']", message: 'workflows/ is deterministic: no require().' },
  ],
};

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', '.data/', '.cache/', 'bench/results/', 'test/histories/', 'clients/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: 'module' },
    rules: {
      // Unused names are errors, except a leading underscore that says so on purpose.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', destructuredArrayIgnorePattern: '^_' },
      ],
      // Where a value's shape is decided at run time (JSON from users, SDK internals) `any` says so.
      '@typescript-eslint/no-explicit-any': 'off',
      // Non-null assertions follow checks the compiler cannot see (Map lookups after has()).
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  { files: ['workflows/**/*.ts'], ignores: ['workflows/**/*.test.ts'], rules: workflowImportRules },
  // Activities and workflows as small named functions: none longer than 60 lines (blank lines and
  // comments not counted) in the service's code. Route tables (one function listing a surface's
  // routes), tests and migrations are exempt.
  {
    files: ['src/**/*.ts', 'activities/**/*.ts', 'workflows/**/*.ts'],
    rules: { 'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true }] },
  },
  { files: ['src/**/*.routes.ts', '**/*.test.ts', 'src/migrations/**'], rules: { 'max-lines-per-function': 'off' } },
  { files: ['**/*.mjs', 'bin/**/*.js', 'eslint.config.js'], languageOptions: { globals: { process: 'readonly', console: 'readonly', URL: 'readonly' } } },
  // The data converter the Temporal SDK loads by path with require(): CommonJS, requiring the SDK only.
  {
    files: ['workflows/**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', exports: 'writable' } },
    rules: {
      '@typescript-eslint/no-require-imports': ['error', { allow: ['^@temporalio/common$'] }],
    },
  },
);
