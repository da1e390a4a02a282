/**
 * The catalogue of error codes: every code the service answers with, records in a run or hands to
 * the model in a tool result, declared once with
 *
 * - `status`: the HTTP status of an error answer with this code (`{status: "fail", error: <code>}`),
 *   or `null` for a code that is never an answer of its own (it appears in an execution's or a
 *   node's `error`, in an agent tool result, in a webhook delivery, or only between the service's
 *   own parts);
 * - `meaning`: what happened and what the client can do, in one sentence;
 * - `otherStatuses`, for the few codes answered with another status in one place: that status and
 *   where (an agent turn answers a provider's egress refusal 502, as every provider failure);
 * - `retried`, for the codes a node of a run can fail with: `false` is a refusal (the same input
 *   fails the same way, so Temporal never tries again), `true` is tried again under the node's
 *   `retry` policy, `'per_failure'` says on each failure (an HTTP 4xx answer is final, a 429, a 5xx
 *   or a network error is tried again).
 *
 * It lives in workflows/ because workflow code may import only from workflows/ and names codes
 * itself (the node activities' `nonRetryableErrorTypes`, the agent session's refusals, the
 * licence webhook's final errors); src/ and activities/ import it from here too. Pure data, no
 * imports: nothing in it can make workflow code nondeterministic. `AppError`
 * (src/platform/errors.ts) takes its codes from it (its status too), the OpenAPI document lists
 * each operation's codes from it (each route names the codes it answers besides those every
 * route answers), and docs/api.md's table is generated from it (`npm run docs:errors`; a unit
 * test fails when the table is stale).
 */

export interface ErrorCodeSpec {
  readonly status: number | null;
  readonly meaning: string;
  readonly retried?: boolean | 'per_failure';
  readonly otherStatuses?: Readonly<Record<number, string>>;
}

export const ERROR_CODES = {
  // ---- Any request ----------------------------------------------------------------------------
  invalid_request: {
    status: 400,
    meaning: 'The request is malformed (unparsable or missing body, nesting too deep, or a field a contract names); fix it as `message` and `data.errors` say.',
    retried: false,
  },
  validation_failed: {
    status: 400,
    otherStatuses: { 422: "the approver's page: the submitted form is shown again with each problem named (nothing was decided)" },
    meaning:
      'A field, parameter or header has a wrong value or type, or is unknown; `data.errors` names each one. In a run: a node configuration that is invalid once its expressions are evaluated.',
    retried: false,
  },
  unauthenticated: {
    status: 401,
    meaning: 'No or wrong credentials (or a session cookie without a valid nonce); sign in or send an application password.',
  },
  forbidden: {
    status: 403,
    meaning: 'The caller (or the people a run acts for) lacks the right; `data.capability` names a missing capability.',
    retried: false,
  },
  not_found: {
    status: 404,
    meaning: 'No such route or resource, or one the caller may not see (the two are not told apart).',
    retried: false,
  },
  method_not_allowed: { status: 405, meaning: 'The path exists but takes other methods.' },
  conflict: {
    status: 409,
    meaning:
      'The request collides with the current state: a unique value taken (`data.field` names it), a concurrent change (retry), or Temporal refused the request.',
    retried: false,
  },
  payload_too_large: { status: 413, meaning: 'The body is larger than the limit (`SVC_BODY_LIMIT`, or a feature’s own); send less.' },
  unsupported_media_type: {
    status: 415,
    meaning: 'The body is in a content type or encoding the route does not take; send JSON (or a form where the route says so).',
  },
  rate_limited: { status: 429, meaning: 'Too many requests or failed sign-ins; wait the seconds `Retry-After` (and `data.retry_after`) says.' },
  internal_error: {
    status: 500,
    meaning: 'An unexpected failure; the details are in the service log under the request id (`X-Request-Id`).',
    retried: true,
  },
  service_unavailable: {
    status: 503,
    meaning: 'PostgreSQL or Temporal (named in `data.dependency`) cannot be reached; retry after `Retry-After` seconds.',
    retried: true,
  },

  // ---- Workflows and runs ---------------------------------------------------------------------
  workflow_archived: { status: 409, meaning: 'The workflow is archived; restore it before editing, running or replaying it.' },
  not_archived: { status: 409, meaning: 'Only an archived workflow can be purged; archive it first (DELETE without force).' },
  executions_running: { status: 409, meaning: 'The workflow has runs in progress; cancel them or wait before purging it.' },
  idempotency_key_reused: {
    status: 422,
    meaning: 'This `Idempotency-Key` was already used for a different request; use a new key for a new request.',
  },
  execution_running: { status: 409, meaning: 'The execution is still running (or Temporal has not closed its run yet); wait for it or cancel it first.' },
  node_not_run: {
    status: 409,
    meaning: 'The node did not run in that execution (it was skipped or never reached); replay from a node that ran, or the whole run.',
  },
  run_failed: {
    status: 422,
    meaning:
      'The run a webhook with `respond: "last_node"` started failed or was cancelled; `message` is the run’s error message, `data` the execution id, status and error.',
  },
  plan_stale: {
    status: 409,
    meaning: 'The workflows or the files changed since the plan that `plan_hash` names; nothing was applied. Plan again, review it, and apply the new plan.',
  },
  replay_in_progress: { status: 409, meaning: 'A reset replay of this execution is still running (`data.execution_id`); wait for it or cancel it first.' },
  execution_finished: {
    status: 409,
    meaning: 'The execution already ended otherwise than cancelled (`data.status`); only a running execution can be cancelled.',
  },
  expression_error: {
    status: 422,
    meaning:
      'A `{{ }}` expression failed to parse or evaluate (a node’s, or one sent to `POST /expressions/evaluate`, where `data.position` says where); fix the expression.',
    retried: false,
  },
  expression_limit: {
    status: 422,
    meaning: 'A `{{ }}` expression ran past its time or memory limit (`SVC_EXPRESSION_TIMEOUT_MS`, `SVC_EXPRESSION_MEMORY_MB`); make it cheaper.',
    retried: false,
  },
  output_too_large: { status: null, meaning: 'The node’s output is over `SVC_NODE_OUTPUT_LIMIT`; return less (outputs are never truncated).', retried: false },
  child_run_limit: {
    status: null,
    meaning: 'A `run_workflow` child would nest deeper than `SVC_RUN_WORKFLOW_MAX_DEPTH` or start more children than `SVC_RUN_WORKFLOW_MAX_CHILD_RUNS`.',
    retried: false,
  },
  items_not_array: {
    status: null,
    meaning: 'A `for_each` node’s `items` did not evaluate to an array (the message says what it was); make the expression yield a list.',
    retried: false,
  },
  too_many_items: {
    status: null,
    meaning:
      'A `for_each` list is longer than `SVC_FOR_EACH_MAX_ITEMS`, or the loops of the run would list more than `SVC_FOR_EACH_MAX_RUN_ITEMS` items in all; nothing of it ran.',
    retried: false,
  },
  item_failed: {
    status: null,
    meaning:
      'An item of a `for_each` node with `on_item_error: "fail"` failed (the message names its index and error); no item started after it. Its items are listed at `GET /executions/{id}/nodes/{node_id}/items`.',
    retried: false,
  },
  http_error: {
    status: null,
    meaning:
      'An `http_request` node got a non-2xx answer or could not reach its target (`details.status` or `details.reason`); 429, 5xx and network failures are retried.',
    retried: 'per_failure',
  },
  response_too_large: {
    status: 502,
    meaning:
      'An answer from outside (an `http_request` node’s target, a model provider) was larger than `SVC_EGRESS_RESPONSE_LIMIT`; reading stopped at the limit. Never retried: ask for less.',
    retried: false,
  },
  schedule_run_limit: {
    status: null,
    meaning:
      'A run a schedule started was not run: the workflow’s owner already had `SVC_SCHEDULE_MAX_RUNNING_PER_USER` runs started by schedules in progress.',
  },
  timeout: { status: null, meaning: 'The node ran longer than its `timeout_ms`; it is retried under its `retry` policy.', retried: true },
  node_failed: {
    status: null,
    meaning:
      'The node failed unexpectedly (a crash, a dropped connection; a failed child run; a `fail` node without a code); retried under its `retry` policy.',
    retried: true,
  },
  cancelled: { status: null, meaning: 'The run was cancelled while this node was in flight.' },
  terminated: { status: null, meaning: 'The run was terminated or reset in Temporal; a reset run continues as the execution the message names.' },
  start_failed: {
    status: null,
    meaning: 'The run was never started (the service stopped or lost a dependency while starting it); send the request again with its `Idempotency-Key`.',
  },
  reset_failed: {
    status: null,
    meaning: 'A reset replay was never confirmed by Temporal; send the replay again with its `Idempotency-Key`.',
  },
  untrusted_input: {
    status: null,
    meaning:
      'A run was sent input the service did not produce (not encrypted with its key: started, updated or answered with the Temporal CLI or UI); the run failed at once or the update was refused. Use the API.',
  },
  execution_not_ready: {
    status: null,
    meaning: 'Internal: a run’s step found no execution record yet; retried until it appears.',
  },

  // ---- Connections ----------------------------------------------------------------------------
  connection_in_use: { status: 409, meaning: 'Active workflows use the connection (`data.workflows`); pass `force=true` to delete it anyway.' },
  probe_failed: { status: 422, meaning: 'The connection’s test request failed (`data.error` says why: refused, DNS, TLS, a 4xx or 5xx answer).' },
  egress_denied: {
    status: 422,
    meaning: 'The egress policy refused the target (a loopback, private or reserved address not in `SVC_EGRESS_ALLOW`); nothing was sent.',
    retried: false,
    otherStatuses: { 502: 'an agent turn whose model provider the egress policy refused (as every provider failure of a turn)' },
  },
  connection_missing: { status: 404, meaning: 'The node’s connection was deleted; point the node at an existing connection.', retried: false },
  credential_unreadable: {
    status: 500,
    meaning:
      'The connection’s credential was sealed with an encryption key this service no longer has; an operator restores it in `SVC_PREVIOUS_ENCRYPTION_KEYS`.',
    retried: true,
  },

  // ---- Entities and records -------------------------------------------------------------------
  invalid_eql: {
    status: 400,
    meaning: 'A records filter does not parse or type-check; `data.position` (0-based) and `data.reason` say where and why.',
    retried: false,
  },
  change_refused: {
    status: 409,
    meaning: 'Existing records prevent a change to the entity (counted in `data.records`); change or remove them first.',
  },
  unsupported_change: { status: 409, meaning: 'The entity change has no safe conversion of stored values (`data.refusals`); add a new field instead.' },
  destructive_change: {
    status: 409,
    meaning: 'The entity change loses data (`data.dry_run` shows the plan); repeat with `allow_destructive=true` to apply it.',
  },
  entity_protected: { status: 409, meaning: 'Relations of other entities point at this one (`data.entities`); remove them first.' },
  entity_changed: { status: 409, meaning: 'The entity definition changed during the request; retry it.', retried: false },
  record_referenced: { status: 409, meaning: 'Other records still refer to this record; remove those references first.', retried: false },

  // ---- Chat agent -----------------------------------------------------------------------------
  budget_exceeded: { status: 409, meaning: 'The session has used its `budget_usd`; start a new session.' },
  turn_in_progress: { status: 409, meaning: 'A turn of the session is still running; wait for its outcome.' },
  gate_pending: { status: 409, meaning: 'The session waits for a decision on its pending action; approve or reject it first.' },
  action_expired: {
    status: 409,
    meaning: 'The action expired before it was decided and was not carried out (also the result the model reads for it).',
    otherStatuses: { 410: "the approver's page: the link expired with its action" },
  },
  action_already_decided: { status: 409, meaning: 'The action was already approved, rejected, cancelled or closed (`data.status`).' },
  approver_already_decided: {
    status: 409,
    meaning: 'You already decided this approval; it waits for the other approvers it needs (a decision is taken once per person).',
  },
  action_not_approved: {
    status: 409,
    meaning: 'A gated tool call found no matching approved action (the decision was not stored as sent); send the session a new message.',
  },
  action_not_pending: {
    status: null,
    meaning: 'Internal: the session refused a decision on an action not waiting for one; answered as `action_already_decided`.',
  },
  provider_error: {
    status: 502,
    meaning:
      'The model provider failed: unreachable, timed out, kept answering 429 or 5xx, or sent a malformed answer; the session stays usable, so try again.',
    retried: 'per_failure',
  },
  tool_call_limit: {
    status: 502,
    meaning:
      'The model asked for more tool calls in one answer than `SVC_AGENT_MAX_TOOL_CALLS`; none of them ran and the answer was not kept. The session stays usable.',
  },
  provider_auth_failed: { status: 502, meaning: 'The model provider refused the connection’s credential; update the connection.', retried: false },
  provider_unavailable: {
    status: null,
    meaning: 'Internal: the provider answered 429 or 5xx (retried); reported as `provider_error` once retries are used up.',
  },
  rejected_by_user: { status: null, meaning: 'Tool result: the user rejected the gated action; it was not carried out.' },
  outcome_unknown: {
    status: null,
    meaning: 'Tool result: the worker stopped while the approved action ran, so it may or may not have happened; check before retrying.',
  },
  unknown_tool: { status: null, meaning: 'Tool result: the model called a tool that does not exist.' },
  invalid_arguments: { status: null, meaning: 'Tool result: the model’s arguments do not match the tool’s schema (the message names each).' },

  // ---- Licences -------------------------------------------------------------------------------
  license_not_found: { status: 404, meaning: 'No licence matches the key.' },
  license_expired: { status: 403, meaning: 'The licence is past its expiry date; renew it.' },
  license_inactive: { status: 403, meaning: 'The licence is expired, revoked or pending.' },
  site_limit_reached: { status: 409, meaning: 'Every domain slot of the licence is in use (`data.site_limit`); deactivate a site first.' },
  activation_not_found: { status: 404, meaning: 'This site (fingerprint) has no activation on the licence.' },
  already_deactivated: { status: 409, meaning: 'This site was already deactivated.' },
  webhook_inactive: { status: null, meaning: 'Delivery: the licence webhook was deactivated; the delivery is not tried again.' },
  webhook_unreachable: { status: null, meaning: 'Delivery: the webhook’s address could not be reached; tried again with backoff.' },
  webhook_http_error: { status: null, meaning: 'Delivery: the webhook answered other than 2xx; tried again with backoff.' },
} as const satisfies Record<string, ErrorCodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;

/**
 * Each code by name (`CODE.not_found === 'not_found'`), for the places that write a code where
 * the compiler would otherwise take any string: a Temporal failure type, an activity's
 * `nonRetryableErrorTypes`, an agent tool result, a run's or node's error. A code not in the
 * catalogue does not compile.
 */
export const CODE = Object.freeze(Object.fromEntries(Object.keys(ERROR_CODES).map((code) => [code, code]))) as { readonly [C in ErrorCode]: C };

/** The codes an error answer of this HTTP status carries (`CodeWithStatus<409>`). */
export type CodeWithStatus<S extends number> = { [C in ErrorCode]: (typeof ERROR_CODES)[C]['status'] extends S ? C : never }[ErrorCode];

/** The codes an error answer can carry: those with an HTTP status. */
export type HttpErrorCode = { [C in ErrorCode]: (typeof ERROR_CODES)[C]['status'] extends number ? C : never }[ErrorCode];

/** The codes a node of a run can fail with (those the catalogue says whether they are retried). */
export type NodeErrorCode = { [C in ErrorCode]: (typeof ERROR_CODES)[C] extends { retried: boolean | 'per_failure' } ? C : never }[ErrorCode];

/** Whether an answer with `code` may carry `status`: the code's own status or one of its `otherStatuses`. */
export function answersWith(code: ErrorCode, status: number): boolean {
  const spec: ErrorCodeSpec = ERROR_CODES[code];
  return spec.status === status || (spec.otherStatuses !== undefined && status in spec.otherStatuses);
}

export const isErrorCode = (value: unknown): value is ErrorCode => typeof value === 'string' && Object.prototype.hasOwnProperty.call(ERROR_CODES, value);

/** Whether `value` is a code an error answer can carry (one with an HTTP status). */
export const isHttpErrorCode = (value: unknown): value is HttpErrorCode => isErrorCode(value) && ERROR_CODES[value].status !== null;

/** Whether a node failing with `code` is tried again; `undefined` for a code no node fails with. */
export function nodeRetry(code: string): boolean | 'per_failure' | undefined {
  return isErrorCode(code) ? (ERROR_CODES[code] as ErrorCodeSpec).retried : undefined;
}

/** The refusals among the node codes: the `nonRetryableErrorTypes` of every node activity. */
export const NODE_REFUSALS: readonly NodeErrorCode[] = (Object.keys(ERROR_CODES) as ErrorCode[]).filter(
  (code): code is NodeErrorCode => (ERROR_CODES[code] as ErrorCodeSpec).retried === false,
);
