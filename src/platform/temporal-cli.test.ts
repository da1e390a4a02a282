import { describe, expect, it } from 'vitest';
import { goInstallEnv } from './temporal-cli.js';

describe('the environment of a go install', () => {
  it('lets Go fetch the toolchain a module requires, unless the caller chose otherwise', () => {
    // Go distributions pin GOTOOLCHAIN=local in their go.env; a Go older than the Temporal server
    // needs (1.25) then refuses the build instead of switching.
    expect(goInstallEnv({ PATH: '/usr/bin' }, '/cache/bin')).toEqual({ PATH: '/usr/bin', GOTOOLCHAIN: 'auto', GOBIN: '/cache/bin' });
    expect(goInstallEnv({ GOTOOLCHAIN: 'local' }, '/cache/bin').GOTOOLCHAIN).toBe('local');
    expect(goInstallEnv({ GOTOOLCHAIN: 'go1.25.4' }, '/cache/bin').GOTOOLCHAIN).toBe('go1.25.4');
  });
});
