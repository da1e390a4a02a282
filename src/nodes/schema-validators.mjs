// JSON Schemas as the service checks a value against a schema that came with a node (an approval's
// `editable` schema): Ajv for draft 2020-12 with the standard formats, not strict (a schema may
// carry keywords of its own), every error reported; each schema compiled once, the 200 most
// recent kept. The code is shared by the API (src/approvals/editable-fields.ts) and the expression
// sandbox's thread (expression.worker.mjs), which runs the patterns under its deadline: plain
// JavaScript, so the worker thread loads it as it is. Each caller holds a cache of its own.
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// Both are CommonJS: under ESM their export arrives as the module's default, or as a property of it.
const Ajv2020 = Ajv2020Module.Ajv2020 ?? Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;
const KEPT = 200;
// Ajv keeps every schema it compiled (and the absolute `$id`s inside them) for the life of its
// instance, whatever this cache lets go: a new instance after this many compilations keeps the
// memory bounded (a validator holds on to the instance that compiled it until it is let go).
const PER_INSTANCE = 2 * KEPT;
// Ajv refuses a schema whose nested absolute `$id` another schema of the instance already gave to
// different content: schemas from different people must not block each other.
const ID_CLASH = /already exists|resolves to more than one schema/;

function newAjv() {
  // `addUsedSchema: false`: a schema's own `$id` is not registered by name in the instance.
  const ajv = new Ajv2020({ allErrors: true, strict: false, addUsedSchema: false });
  addFormats(ajv);
  return ajv;
}

/** A validator cache of its own: `validatorOf(schema)` compiles a schema once and answers Ajv's validate function. */
export function schemaValidators() {
  let ajv;
  let compiledByAjv = 0;
  const compiled = new Map();
  const compile = (schema) => {
    if (!ajv || compiledByAjv >= PER_INSTANCE) {
      ajv = newAjv();
      compiledByAjv = 0;
    }
    compiledByAjv++;
    try {
      return ajv.compile(schema);
    } catch (err) {
      if (compiledByAjv === 1 || !ID_CLASH.test(String(err?.message))) throw err;
      // Compiled on an instance of its own, which no other schema shares.
      return newAjv().compile(schema);
    }
  };
  return {
    validatorOf(schema) {
      const key = JSON.stringify(schema);
      let validate = compiled.get(key);
      if (!validate) {
        validate = compile(schema);
        if (compiled.size >= KEPT) compiled.delete(compiled.keys().next().value);
        compiled.set(key, validate);
      }
      return validate;
    },
  };
}
