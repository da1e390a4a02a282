/** Roles, modelled on WordPress: a role is a fixed set of capabilities. */
export const roles = ['administrator', 'editor', 'subscriber'] as const;
export type Role = (typeof roles)[number];

export const capabilities = [
  'read',
  'edit_posts',
  'svc_agent_use',
  'svc_agent_approve',
  'svc_view_records',
  'svc_create_records',
  'svc_edit_records',
  'svc_delete_records',
  'svc_manage_entities',
  'svc_manage_workflows',
  'svc_manage_connections',
  'svc_manage_licenses',
  // Reading any run's Temporal payloads in clear through the codec endpoint (operators).
  'svc_decode_payloads',
  'list_users',
  'create_users',
] as const;
export type Capability = (typeof capabilities)[number];

const granted: Record<Role, ReadonlySet<string>> = {
  administrator: new Set(capabilities),
  editor: new Set([
    'read',
    'edit_posts',
    // Deciding pending agent actions of other users' sessions (their approval policy permitting).
    'svc_agent_approve',
    'svc_view_records',
    'svc_create_records',
    'svc_edit_records',
    'svc_delete_records',
    'svc_manage_workflows',
  ]),
  subscriber: new Set(['read', 'svc_view_records']),
};

/**
 * Capabilities that are aliases of another one. `svc_agent_use` maps to a host capability
 * (`edit_posts` unless SVC_AGENT_CAPABILITY says otherwise), as the host platform does.
 */
export interface CapabilityMap {
  svc_agent_use: string;
}

export function hasCapability(role: Role, capability: string, map: CapabilityMap): boolean {
  if (role === 'administrator') return true;
  const effective = capability === 'svc_agent_use' ? map.svc_agent_use : capability;
  return granted[role].has(effective);
}

export function capabilitiesOf(role: Role, map: CapabilityMap): string[] {
  return capabilities.filter((c) => hasCapability(role, c, map));
}

export const isRole = (value: string): value is Role => (roles as readonly string[]).includes(value);
