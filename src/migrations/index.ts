import type { MigrationObject } from '@mikro-orm/core';
import { Migration20261122000001Foundation } from './Migration20261122000001Foundation.js';
import { Migration20261122000100Workflows } from './Migration20261122000100Workflows.js';
import { Migration20261122000200Records } from './Migration20261122000200Records.js';
import { Migration20261122000300Licences } from './Migration20261122000300Licences.js';
import { Migration20261122000400Agent } from './Migration20261122000400Agent.js';
import { Migration20261123000100DurableCore } from './Migration20261123000100DurableCore.js';
import { Migration20261123000200LicenceKit } from './Migration20261123000200LicenceKit.js';
import { Migration20261123000300AgentGate } from './Migration20261123000300AgentGate.js';
import { Migration20261124000100Isolation } from './Migration20261124000100Isolation.js';
import { Migration20261125000500Waits } from './Migration20261125000500Waits.js';
import { Migration20261125000600ErrorPaths } from './Migration20261125000600ErrorPaths.js';
import { Migration20261125000700ForEach } from './Migration20261125000700ForEach.js';
import { Migration20261125001000ErrorWorkflowChooser } from './Migration20261125001000ErrorWorkflowChooser.js';
import { Migration20261129000100WorkflowChanges } from './Migration20261129000100WorkflowChanges.js';

/** Every migration, in order. New migrations are appended here so bundled builds find them. */
export const migrations: MigrationObject[] = [
  { name: 'Migration20261122000001Foundation', class: Migration20261122000001Foundation },
  { name: 'Migration20261122000100Workflows', class: Migration20261122000100Workflows },
  { name: 'Migration20261122000200Records', class: Migration20261122000200Records },
  { name: 'Migration20261122000300Licences', class: Migration20261122000300Licences },
  { name: 'Migration20261122000400Agent', class: Migration20261122000400Agent },
  { name: 'Migration20261123000100DurableCore', class: Migration20261123000100DurableCore },
  { name: 'Migration20261123000200LicenceKit', class: Migration20261123000200LicenceKit },
  { name: 'Migration20261123000300AgentGate', class: Migration20261123000300AgentGate },
  { name: 'Migration20261124000100Isolation', class: Migration20261124000100Isolation },
  { name: 'Migration20261125000500Waits', class: Migration20261125000500Waits },
  { name: 'Migration20261125000600ErrorPaths', class: Migration20261125000600ErrorPaths },
  { name: 'Migration20261125000700ForEach', class: Migration20261125000700ForEach },
  { name: 'Migration20261125001000ErrorWorkflowChooser', class: Migration20261125001000ErrorWorkflowChooser },
  { name: 'Migration20261129000100WorkflowChanges', class: Migration20261129000100WorkflowChanges },
];
