import type { MigrationObject } from '@mikro-orm/core';
import { Migration20261122000001Foundation } from './Migration20261122000001Foundation.js';
import { Migration20261122000200Records } from './Migration20261122000200Records.js';

/** Every migration, in order. New migrations are appended here so bundled builds find them. */
export const migrations: MigrationObject[] = [
  { name: 'Migration20261122000001Foundation', class: Migration20261122000001Foundation },
  { name: 'Migration20261122000200Records', class: Migration20261122000200Records },
];
