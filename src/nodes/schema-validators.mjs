// JSON Schemas as the service checks a value against a schema that came with a node (an approval's
// `editable` schema): Ajv for draft 2020-12 with the standard formats, not strict (a schema may
// carry keywords of its own), every error reported; each schema compiled once, the 200 most
// recent kept. Shared by the API (src/approvals/editable-fields.ts) and the expression sandbox's
// thread (expression.worker.mjs), which runs the patterns under its deadline: plain JavaScript,
// so the worker thread loads it as it is.
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// Both are CommonJS: under ESM their export arrives as the module's default, or as a property of it.
const Ajv2020 = Ajv2020Module.Ajv2020 ?? Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;
const KEPT = 200;

/** A validator cache of its own: `validatorOf(schema)` compiles a schema once and answers Ajv's validate function. */
export function schemaValidators() {
  let ajv;
  const compiled = new Map();
  return {
    validatorOf(schema) {
      const key = JSON.stringify(schema);
      let validate = compiled.get(key);
      if (!validate) {
        if (!ajv) {
          ajv = new Ajv2020({ allErrors: true, strict: false });
          addFormats(ajv);
        }
        validate = ajv.compile(schema);
        if (compiled.size >= KEPT) compiled.delete(compiled.keys().next().value);
        compiled.set(key, validate);
      }
      return validate;
    },
  };
}
