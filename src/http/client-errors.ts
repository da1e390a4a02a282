import type { Server } from 'node:http';
import type { Duplex } from 'node:stream';

/** How long a refused request's remaining bytes are read and dropped before its connection is closed. */
const DRAIN_MS = 5_000;

const STATUS: Record<string, string> = {
  HPE_HEADER_OVERFLOW: '431 Request Header Fields Too Large',
  ERR_HTTP_REQUEST_TIMEOUT: '408 Request Timeout',
};

/**
 * Answers a request Node's HTTP parser refuses before the application sees it (a request line or
 * headers over the parser's limit: 431; a malformed request: 400; too slow: 408), so the client
 * reads the answer. Node's own handling writes it and destroys the socket at once, while a client
 * that sends the whole request before reading (curl, most HTTP libraries) is still sending: with
 * bytes unread the kernel resets the connection, and the client gets a reset instead of the
 * status. Here the answer goes out when no response is in progress on the connection, and what
 * the client still sends is read and dropped until it closes (or DRAIN_MS has passed).
 */
export function answerClientErrors(server: Server): void {
  // Responses started and not yet finished, per connection: an answer written among them would corrupt one.
  const open = new WeakMap<object, number>();
  server.on('request', (req, res) => {
    const socket = req.socket;
    open.set(socket, (open.get(socket) ?? 0) + 1);
    let done = false;
    const over = () => {
      if (!done) open.set(socket, (open.get(socket) ?? 1) - 1);
      done = true;
    };
    res.once('finish', over);
    res.once('close', over);
  });
  const refused = new WeakSet<Duplex>();
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (refused.has(socket)) return;
    refused.add(socket);
    if (err.code === 'ECONNRESET' || !socket.writable || (open.get(socket) ?? 0) > 0) {
      socket.destroy();
      return;
    }
    // The parser is done with this connection: its bytes from now on are read and dropped.
    socket.removeAllListeners('data');
    socket.on('data', () => undefined);
    socket.on('error', () => undefined);
    socket.resume();
    setTimeout(() => socket.destroy(), DRAIN_MS).unref();
    socket.end(`HTTP/1.1 ${STATUS[err.code ?? ''] ?? '400 Bad Request'}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  });
}
