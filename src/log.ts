import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/** pino JSON logs; pretty when attached to a terminal (LOG_PRETTY overrides). Secrets are redacted. */
export function createLogger(level: string, pretty = Boolean(process.stdout.isTTY), destination?: DestinationStream): Logger {
  const options = {
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["x-session-token"]', 'req.headers["sec-websocket-protocol"]', '*.secret', '*.secret_key', '*.sharedSecret', '*.privateKey', '*.password'],
      censor: '[redacted]',
    },
    ...(pretty && !destination ? { transport: { target: 'pino-pretty', options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } } } : {}),
  };
  return destination ? pino(options, destination) : pino(options);
}
