import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's Chromium: playwright-core drives it and never downloads a browser of its own. */
export const CHROMIUM = '/usr/bin/chromium';

// Background networking, component updates and sync make Chromium dial out at start; on a
// machine without internet those connections are refused, so they stay off.
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Installs Debian's `chromium` package when /usr/bin/chromium is missing (as CI does). */
export function ensureChromium(): string {
  if (existsSync(CHROMIUM)) return CHROMIUM;
  const install = spawnSync('sh', ['-c', 'apt-get update -qq && apt-get install -y -qq chromium'], {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    encoding: 'utf8',
    timeout: 15 * 60_000,
  });
  if (install.status !== 0 || !existsSync(CHROMIUM)) {
    const detail = (install.error?.message ?? `${install.stderr}${install.stdout}`).trim().split('\n').slice(-5).join('\n');
    throw new Error(
      `${CHROMIUM} is missing and "apt-get install -y chromium" failed; install Debian's chromium package (as root) and run the tests again.\n${detail}`,
    );
  }
  return CHROMIUM;
}

/** A headless Chromium for tests that look at a page as an operator would. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: ensureChromium(), headless: true, args: ARGS });
}
