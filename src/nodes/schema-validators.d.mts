import type { ValidateFunction } from 'ajv/dist/2020.js';

export function schemaValidators(): { validatorOf(schema: object): ValidateFunction };
