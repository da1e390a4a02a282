import { connect, createServer, type Socket } from 'node:net';

/**
 * A TCP stand-in for a server on loopback, for a test to misbehave with: `pass` forwards both ways,
 * `drop` closes every new connection at once (a server restarting), `hold` keeps what clients send
 * until passed again (a server too busy to read), while answers still reach them.
 */
export interface TcpProxy {
  /** host:port to connect to instead of the server. */
  address: string;
  port: number;
  /** Connections closed while dropping. */
  readonly dropped: number;
  set(mode: 'pass' | 'drop' | 'hold'): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }, mode: 'pass' | 'drop' | 'hold' = 'pass'): Promise<TcpProxy> {
  const clients = new Map<Socket, { upstream: Socket; held: Buffer[] }>();
  let dropped = 0;
  const flush = () => {
    for (const { upstream, held } of clients.values()) for (const chunk of held.splice(0)) upstream.write(chunk);
  };
  const server = createServer((client) => {
    client.on('error', () => undefined);
    if (mode === 'drop') {
      dropped++;
      client.destroy();
      return;
    }
    const upstream = connect(target.port, target.host);
    const link = { upstream, held: [] as Buffer[] };
    clients.set(client, link);
    upstream.on('error', () => client.destroy()).on('close', () => client.destroy());
    client.on('close', () => {
      clients.delete(client);
      upstream.destroy();
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    client.on('data', (chunk: Buffer) => (mode === 'hold' ? link.held.push(chunk) : upstream.write(chunk)));
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const port = (server.address() as { port: number }).port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    get dropped() {
      return dropped;
    },
    set(next) {
      mode = next;
      if (mode === 'pass') flush();
    },
    async close() {
      for (const client of clients.keys()) client.destroy();
      await new Promise((ok) => server.close(ok));
    },
  };
}
