/** Writes the tables of error codes into docs/api.md from the catalogue (workflows/error-codes.ts). */
import { readFileSync, writeFileSync } from 'node:fs';
import { withErrorTables } from '../src/platform/error-table.js';

const path = new URL('../docs/api.md', import.meta.url);
const before = readFileSync(path, 'utf8');
const after = withErrorTables(before);
if (after !== before) writeFileSync(path, after);
console.log(after === before ? 'docs/api.md: the error tables are current' : 'docs/api.md: error tables rewritten');
