import { describe, expect, it } from 'vitest';
import { createLogger } from '../src/log.js';

describe('logger', () => {
  it('redacts credentials, including a WebSocket bearer token sent as subprotocols', () => {
    const lines: string[] = [];
    const log = createLogger('info', false, { write: (line: string) => void lines.push(line) });
    log.info({
      req: { headers: { authorization: 'Bearer jwt-in-header', cookie: 'session=cookie-value', 'sec-websocket-protocol': 'bearer, jwt-in-subprotocol', host: 'gw.example' } },
      claim: { sharedSecret: 'cgs_shared', privateKey: 'pem-key' },
    }, 'request');
    const text = lines.join('');
    for (const secret of ['jwt-in-header', 'cookie-value', 'jwt-in-subprotocol', 'cgs_shared', 'pem-key']) expect(text).not.toContain(secret);
    expect(JSON.parse(text).req.headers).toMatchObject({ 'sec-websocket-protocol': '[redacted]', host: 'gw.example' });
  });
});
