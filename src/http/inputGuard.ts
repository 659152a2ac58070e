/**
 * One input guard for every HTTP route, run before validation, so that no handler, service or
 * SQL statement ever sees a string Postgres (or any sane consumer) refuses:
 * - JSON bodies (application/json and any `+json` type) are read as bytes and decoded with a
 *   fatal UTF-8 decoder (a default decode would silently turn bad bytes into U+FFFD), refused
 *   when nested deeper than JSON_MAX_DEPTH (checked before parsing, so a deep document cannot
 *   overflow the stack of the parser or of any code walking the result), parsed with
 *   secure-json-parse as Fastify does (`__proto__` / `constructor.prototype` refused), and
 *   refused when any key or value holds a NUL or a lone UTF-16 surrogate.
 * - Path params and the query string: the same characters, and percent-escapes that do not
 *   decode to UTF-8 (the query parser would keep them as literal text).
 * Every refusal is a 400 Problem whose detail names the field (`body.to.subscriberId: ...`).
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import sjson from 'secure-json-parse';
import { fieldPath, findRefusedText } from '../lib/text.js';
import { Problem } from './problem.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** the bytes of a JSON body as received */
    rawBody?: Buffer;
  }
}

/** Deepest nesting of arrays/objects a JSON body may have. */
export const JSON_MAX_DEPTH = 64;

/** `application/json` is registered by name; this catches `application/merge-patch+json` etc. */
const PLUS_JSON = /^application\/[\w.!#$&^-]+\+json\s*(?:;|$)/i;

// Default options (BOM stripped); `fatal` makes invalid UTF-8 throw instead of becoming U+FFFD.
const utf8 = new TextDecoder('utf-8', { fatal: true });

const malformed = (detail: string) => new Problem(400, detail, { title: 'Malformed JSON' });
const invalidText = (detail: string) => new Problem(400, detail, { title: 'Invalid characters' });

const hex4 = (text: string, at: number) => parseInt(text.slice(at, at + 4), 16);
const isHigh = (code: number) => code >= 0xd800 && code <= 0xdbff;
const isLow = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/**
 * One pass over the text: is the nesting deeper than `maxDepth`, and does a string hold a
 * `\u` escape of NUL or of a lone surrogate (the only ways such characters get past a fatal
 * UTF-8 decode and JSON.parse, which refuses raw control characters)? An escaped pair
 * (`\ud83d\ude00`) is fine. String contents are skipped with indexOf (native), stopping only
 * at escapes. Invalid JSON may fool the scan; the parser refuses it anyway.
 */
function scan(text: string, maxDepth: number): { tooDeep: boolean; badEscape: boolean } {
  let depth = 0;
  let badEscape = false;
  // the next quote and backslash after the cursor, searched again only once passed
  let quote = -1;
  let backslash = text.indexOf('\\');
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      for (;;) {
        if (quote <= i) quote = text.indexOf('"', i + 1);
        if (quote === -1) return { tooDeep: false, badEscape }; // unterminated string
        if (backslash !== -1 && backslash <= i) backslash = text.indexOf('\\', i + 1);
        if (backslash === -1 || backslash > quote) break;
        // an escape inside the string: i moves to its last character
        i = backslash + 1;
        if (text.charCodeAt(i) === 0x75 /* u */) {
          const code = hex4(text, i + 1);
          i += 4;
          if (isHigh(code) && text.charCodeAt(i + 1) === 0x5c && text.charCodeAt(i + 2) === 0x75 && isLow(hex4(text, i + 3))) i += 6;
          else if (code === 0 || isHigh(code) || isLow(code)) badEscape = true;
        }
      }
      i = quote;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > maxDepth) return { tooDeep: true, badEscape };
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
  }
  return { tooDeep: false, badEscape };
}

function parseText(text: string): unknown {
  try {
    return sjson.parse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    throw malformed(`request body is not valid JSON: ${(err as Error).message}`);
  }
}

/** Parses a JSON request body (bytes) or throws a 400 Problem naming what is wrong. */
export function parseJsonBody(body: Buffer, maxDepth = JSON_MAX_DEPTH): unknown {
  if (body.length === 0) throw malformed('request body is empty; send a JSON document or no Content-Type');
  let text: string;
  let validUtf8 = true;
  try {
    text = utf8.decode(body);
  } catch {
    // Decode byte for byte so the document still parses and the bad string can be named (a
    // string holding an escaped U+0080..U+00FF before the bad one would be named instead).
    validUtf8 = false;
    text = body.toString('latin1');
  }
  const { tooDeep, badEscape } = scan(text, maxDepth);
  if (tooDeep) throw malformed(`request body is nested deeper than ${maxDepth} levels`);
  const value = parseText(text);
  if (!validUtf8) {
    const found = findRefusedText(value, 'body', (s) => (isUtf8(Buffer.from(s, 'latin1')) ? undefined : 'is not valid UTF-8'));
    throw invalidText(found ?? 'body: is not valid UTF-8');
  }
  if (badEscape) throw invalidText(findRefusedText(value, 'body') ?? 'body: contains a NUL character or a lone surrogate');
  return value;
}

/** The raw query string has a percent-escape that is not UTF-8: `query.name: ...`, else undefined. */
function badQueryEscape(url: string): string | undefined {
  const q = url.indexOf('?');
  if (q === -1 || url.indexOf('%', q) === -1) return undefined;
  for (const pair of url.slice(q + 1).split('&')) {
    if (!pair.includes('%')) continue;
    const eq = pair.indexOf('=');
    const rawKey = eq === -1 ? pair : pair.slice(0, eq);
    try {
      decodeURIComponent(pair.replace(/\+/g, ' '));
    } catch {
      let key = rawKey;
      try {
        key = decodeURIComponent(rawKey.replace(/\+/g, ' '));
      } catch {
        return `query: parameter name ${JSON.stringify(rawKey)} has a percent-encoding that is not valid UTF-8`;
      }
      return `${fieldPath('query', key)}: has a percent-encoding that is not valid UTF-8`;
    }
  }
  return undefined;
}

/**
 * Throws a 400 Problem when params or query hold a refused character or escape. (Raw bytes
 * outside printable ASCII never get here: Node's HTTP parser refuses them in the request line.)
 */
export function checkParamsAndQuery(request: FastifyRequest): void {
  const bad =
    findRefusedText(request.params, 'params') ??
    findRefusedText(request.query, 'query') ??
    badQueryEscape(request.url);
  if (bad) throw invalidText(bad);
}

/**
 * Installs the guard on the root instance (before any route plugin, so every route inherits it).
 * Params and query are checked in the first onRequest hook: before authentication, whose
 * policy layers may already look params up.
 */
export function installInputGuard(app: FastifyInstance, maxDepth = JSON_MAX_DEPTH): void {
  app.addHook('onRequest', (request, _reply, done) => {
    try {
      checkParamsAndQuery(request);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  });
  app.removeContentTypeParser('application/json');
  for (const type of ['application/json', PLUS_JSON]) {
    app.addContentTypeParser(type, { parseAs: 'buffer' }, (request, body: Buffer | string, done) => {
      // kept for signatures over the exact body bytes (SVC-HMAC-SHA256)
      request.rawBody = body as Buffer;
      try {
        done(null, parseJsonBody(body as Buffer, maxDepth));
      } catch (err) {
        done(err as Error, undefined);
      }
    });
  }
}
