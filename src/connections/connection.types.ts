export const connectionTypes = ['http_bearer', 'http_basic', 'http_header', 'openai', 'anthropic'] as const;
export type ConnectionType = (typeof connectionTypes)[number];

/** Settings of a connection besides its credential: `base_url`, and `header_name` for http_header. */
export type ConnectionExtra = { base_url: string; header_name?: string } & Record<string, unknown>;

/** A row of `connections`. `cred_encrypted` is AES-256-GCM under the service key; never returned. */
export interface ConnectionRow {
  id: number;
  type: ConnectionType;
  label: string;
  cred_encrypted: string;
  cred_preview: string;
  key_id: string;
  extra: ConnectionExtra;
  owner_id: number;
  /** Users besides the owner who may use it in their workflows and agent sessions. */
  shared_with: number[];
  created_at: Date | string;
  updated_at: Date | string;
}
