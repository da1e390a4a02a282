import { createServer, type AddressInfo, type Server } from 'node:net';

/**
 * `n` TCP ports on `host` that were free a moment ago, distinct from one another: every listener
 * is held until all are known (ports found one after the other, each released before the next
 * is looked for, can come back twice). `choose` names the port to try; 0 lets the system pick.
 */
async function holdPorts(n: number, host: string, choose: () => number): Promise<number[]> {
  const held: Server[] = [];
  try {
    while (held.length < n) {
      const port = choose();
      const server = createServer();
      const listening = await new Promise<boolean>((resolve, reject) => {
        server.once('error', (err) => (port === 0 ? reject(err) : resolve(false)));
        server.listen(port, host, () => resolve(true));
      });
      if (listening) held.push(server);
    }
    return held.map((s) => (s.address() as AddressInfo).port);
  } finally {
    await Promise.all(held.map((s) => new Promise<void>((ok) => s.close(() => ok()))));
  }
}

/** `n` distinct TCP ports that were free a moment ago on `host` (loopback unless named). */
export const freePorts = (n: number, host = '127.0.0.1') => holdPorts(n, host, () => 0);

/** A TCP port that was free a moment ago on `host` (loopback unless named). */
export const freePort = async (host = '127.0.0.1') => (await freePorts(1, host))[0]!;

/** `n` distinct free ports below 32768 on loopback (Temporal stores membership ports in a smallint column). */
export const freeLowPorts = (n: number) => holdPorts(n, '127.0.0.1', () => 20_000 + Math.floor(Math.random() * 12_000));
