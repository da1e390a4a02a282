import { createServer } from 'node:http';
import { request as undiciRequest } from 'undici';
import { EgressPolicy, parseEgressAllow } from '../../src/platform/egress.js';
const server = createServer((req, res) => { res.setHeader('content-type', 'application/json'); res.end(JSON.stringify({ ok: true, n: 42, text: 'hello' })); });
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const port = (server.address() as any).port;
const egress = new EgressPolicy(parseEgressAllow(`127.0.0.1:${port}`));
const url = new URL(`http://127.0.0.1:${port}/x`);
const N = 3000;
async function time(name: string, fn: () => Promise<unknown>) {
  for (let i = 0; i < 500; i++) await fn();
  const c0 = process.cpuUsage(); const t0 = performance.now();
  for (let i = 0; i < N; i++) await fn();
  const c = process.cpuUsage(c0);
  console.log(name.padEnd(28), ((performance.now() - t0) * 1000 / N).toFixed(1), 'us wall', ((c.user + c.system) / N).toFixed(1), 'us cpu (client + server)');
}
for (let round = 0; round < 2; round++) {
  await time('egress.fetch + arrayBuffer', async () => { const r = await egress.fetch(url, { method: 'GET', headers: { accept: 'application/json' }, signal: AbortSignal.timeout(5000) }); await r.arrayBuffer(); });
  await time('global fetch + arrayBuffer', async () => { const r = await fetch(url, { headers: { accept: 'application/json' } }); await r.arrayBuffer(); });
  await time('undici.request + arrayBuffer', async () => { const r = await undiciRequest(url, { method: 'GET', headers: { accept: 'application/json' }, dispatcher: egress.dispatcher, signal: AbortSignal.timeout(5000) }); await r.body.arrayBuffer(); });
}
server.close(); await egress.close();
