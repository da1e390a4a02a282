import type { z } from 'zod';
import type { GraphNode, RunNodeOutput } from '../../workflows/defs.js';
import type { Principal } from '../auth/auth.service.js';
import type { PriceTable } from '../providers/pricing.js';
import type { RecordService } from '../records/record.service.js';
import type { ResolvedConnection } from '../connections/connection.service.js';
import type { EventService } from '../events/event.service.js';

/** What a node implementation receives; the credential is loaded and decrypted only on demand. */
export interface NodeRunContext<C> {
  node: GraphNode;
  /** The configuration with every `{{ }}` evaluated and validated against the node's schema. */
  config: C;
  /** Records, acted on with the rights of the people the run acts for (record nodes). */
  records: Pick<RecordService, 'create' | 'update' | 'list'>;
  /** Model prices (llm_prompt's cost). */
  prices: PriceTable;
  execution: { id: number; workflowId: number; ownerId: number; actingUserIds: number[] };
  /** Sends events to waiting runs (emit_event), as the people the run acts for. */
  events: Pick<EventService, 'send'>;
  signal: AbortSignal;
  /** The node's connection, when every person the run acts for may use it (else 403 `forbidden`). */
  connection(): Promise<ResolvedConnection>;
  /**
   * The people the run acts for, as one principal holding only the rights all of them hold: the
   * workflow's owner, the author of the version that runs, whoever started it by hand, and for a
   * run_workflow child the people of the run that called it. Record nodes act as it.
   */
  actor(): Promise<Principal>;
  heartbeat(details?: unknown): void;
}

/** One node type: its configuration schema, documentation and implementation. */
export interface NodeType<C = unknown> {
  type: string;
  /** No side effects: may run as a Temporal local activity. */
  pure: boolean;
  /**
   * A call of this type whose timeout is at most SVC_LOCAL_CALL_MAX_MS runs as a Temporal local
   * activity (retried under the node's policy all the same); a longer one as a regular activity.
   * As a run's first node its first attempt may be made by the API before the activity begins
   * (SVC_FIRST_CALL_AHEAD): `run` reads the activity only through what it is given (`signal`,
   * `heartbeat`), never through Temporal's `Context`, and bounds its own call by the node's timeout.
   */
  localWhenShort?: boolean;
  /**
   * How the workflow runs it when not as an activity: `timer`, a durable timer of the config's
   * `duration_ms`; `child`, a child run of the stored workflow its config names (`workflow_id`,
   * `payload`); `wait`, a wait for an event (workflows/wait-for-event.ts); `approval`, an action on
   * the gate (workflows/approval.ts); `loop`, a loop over items (for_each: its body runs per item
   * in child workflows, workflows/for-each.ts). Such a type has no `run`.
   */
  runsAs?: 'timer' | 'child' | 'wait' | 'approval' | 'loop';
  description: string;
  /** Uses `connection_id` (validated to exist when the workflow is saved). */
  needsConnection?: boolean;
  /**
   * What the stored configuration names besides the node's `connection_id`, checked when the
   * workflow is saved: connections (each must be usable by the people its runs act for; a
   * connection in use cannot be deleted) and logins (each must exist), with where they are.
   */
  references?: (config: Record<string, unknown>) => { connections: { id: number; field: string }[]; logins: { login: string; field: string }[] };
  /** Schema of the stored configuration (strings may still hold `{{ }}`). */
  configSchema: z.ZodType;
  /**
   * The configuration as the OpenAPI document shows it, when it holds nodes itself (a for_each
   * body): built with `node`, the document's schema of any node. Defaults to configSchema.
   */
  documentedConfig?: (node: z.ZodType) => z.ZodType;
  /** Schema after expressions are evaluated; defaults to configSchema. */
  resolvedSchema?: z.ZodType<C>;
  /** Branch names edges may carry, or 'any' when they depend on the configuration. */
  branches?: (config: Record<string, unknown>) => string[];
  /** Activity nodes run here; a type that `runsAs` a timer or a child has none. */
  run?(ctx: NodeRunContext<C>): Promise<RunNodeOutput>;
}
