import net from 'node:net';

export interface RawResponse {
  status: number;
  /** header names lower-case */
  headers: Record<string, string>;
  body: string;
}

/** Parses the HTTP/1.1 responses in `data` (Content-Length framed, as the gateway's errors are). */
export function parseResponses(data: Buffer): RawResponse[] {
  const out: RawResponse[] = [];
  let rest = data;
  while (rest.subarray(0, 9).toString() === 'HTTP/1.1 ') {
    const end = rest.indexOf('\r\n\r\n');
    const [statusLine, ...lines] = rest.subarray(0, end).toString('latin1').split('\r\n');
    const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
    const length = Number(headers['content-length'] ?? 0);
    out.push({ status: Number(statusLine.split(' ')[1]), headers, body: rest.subarray(end + 4, end + 4 + length).toString('utf8') });
    rest = rest.subarray(end + 4 + length);
  }
  return out;
}

/**
 * Sends raw bytes on a new connection and returns the responses once the server closes it: for
 * requests a fetch client would refuse to send or would re-encode.
 */
export function rawExchange(port: number, request: Buffer | string): Promise<RawResponse[]> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => resolve(parseResponses(Buffer.concat(chunks))));
    socket.end(request);
  });
}
