import crypto from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JSON_MAX_DEPTH, parseJsonBody } from '../../src/http/inputGuard.js';
import { findRefusedText } from '../../src/lib/text.js';
import { Problem } from '../../src/http/problem.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';

/** The detail of the 400 Problem parseJsonBody throws for these bytes. */
function refusal(body: Buffer | string): string {
  try {
    parseJsonBody(Buffer.from(body));
  } catch (err) {
    expect(err).toBeInstanceOf(Problem);
    expect((err as Problem).status).toBe(400);
    return (err as Problem).detail;
  }
  throw new Error(`accepted: ${body}`);
}
const bytes = (...parts: (string | number[])[]) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
const nested = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);

describe('parseJsonBody', () => {
  it('parses ordinary JSON, unicode intact, BOM dropped', () => {
    expect(parseJsonBody(Buffer.from('{"a":[1,"é😀\\ud83d\\ude00\\u00e9",{"b":null}]}'))).toEqual({ a: [1, 'é😀😀é', { b: null }] });
    expect(parseJsonBody(bytes([0xef, 0xbb, 0xbf], '{"a":1}'))).toEqual({ a: 1 });
    // U+FFFD sent as such is a valid character, only undecodable bytes are refused
    expect(parseJsonBody(bytes('{"a":"', [0xef, 0xbf, 0xbd], '"}'))).toEqual({ a: '\ufffd' });
  });

  it('names the field holding a NUL or a lone surrogate, in values and in keys', () => {
    expect(refusal('{"to":{"subscriberId":"a\\u0000b"}}')).toBe('body.to.subscriberId: contains a NUL character');
    expect(refusal('{"items":["ok","\\ud800"]}')).toBe('body.items.1: contains a lone surrogate (U+D800), which is not valid Unicode');
    expect(refusal('{"x":"\\udc00 after"}')).toMatch(/^body\.x: contains a lone surrogate \(U\+DC00\)/);
    expect(refusal('{"x":"\\ud83d"}')).toMatch(/^body\.x: contains a lone surrogate/); // high half of 😀 alone
    expect(refusal('{"x":"\\ud83d\\ud83d\\ude00"}')).toMatch(/^body\.x: contains a lone surrogate \(U\+D83D\)/); // a lone high, then a pair
    expect(refusal('{"x":"\\ud83d\\u0041"}')).toMatch(/^body\.x: contains a lone surrogate/);
    // an escaped backslash followed by "u0000" is text, not an escape
    expect(parseJsonBody(Buffer.from('{"x":"\\\\u0000"}'))).toEqual({ x: '\\u0000' });
    expect(refusal('{"desired":{"a\\u0000b":1}}')).toBe('body.desired["a\\u0000b"]: field name contains a NUL character');
    expect(refusal('{"a b":{"\\udfff":1}}')).toBe('body["a b"]["\\udfff"]: field name contains a lone surrogate (U+DFFF), which is not valid Unicode');
  });

  it('names the field holding bytes that are not UTF-8 (truncated, overlong, encoded surrogate, 0xFF)', () => {
    for (const bad of [[0xc3], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xff, 0xfe]]) {
      expect(refusal(bytes('{"ok":"é","list":[{"name":"a', bad, 'b"}]}'))).toBe('body.list.0.name: is not valid UTF-8');
    }
    expect(refusal(bytes('{"k', [0xff], '":1}'))).toBe('body["k\u00ff"]: field name is not valid UTF-8');
  });

  it(`refuses nesting deeper than ${JSON_MAX_DEPTH} levels without recursing, counting only outside strings`, () => {
    expect(parseJsonBody(Buffer.from(nested(JSON_MAX_DEPTH)))).toBeInstanceOf(Array);
    expect(refusal(nested(JSON_MAX_DEPTH + 1))).toBe(`request body is nested deeper than ${JSON_MAX_DEPTH} levels`);
    expect(refusal(nested(1_000_000))).toMatch(/nested deeper/);
    expect(refusal('{"a":'.repeat(5000) + '1' + '}'.repeat(5000))).toMatch(/nested deeper/);
    // brackets and escaped quotes inside strings are not nesting
    const text = JSON.stringify({ s: '['.repeat(500), t: '\\"{{{{' + '{'.repeat(500) });
    expect(parseJsonBody(Buffer.from(text))).toEqual(JSON.parse(text));
  });

  it('property: equals JSON.parse, or refuses exactly the too deep and the NUL/lone-surrogate documents', () => {
    // Strings of nasty code units (NUL, lone surrogates, quotes, backslashes, brackets), nested
    // up to 80 levels; sent as JSON.stringify writes them and with all non-ASCII \u-escaped.
    const unit = fc.oneof(
      fc.constantFrom('\u0000', '\ud800', '\udfff', '😀', '"', '\\', '[', '{', '}', 'é', '\n', 'u'),
      fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
    );
    const documents = fc
      .tuple(fc.jsonValue({ stringUnit: unit, maxDepth: 4 }), fc.nat({ max: 80 }), fc.boolean())
      .map(([v, levels, inObject]) => Array.from({ length: levels }).reduce<unknown>((inner) => (inObject ? { k: inner } : [inner]), v))
      .filter((v) => !/__proto__|"constructor"/.test(JSON.stringify(v)));
    const depthOf = (v: unknown): number => (v !== null && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0);
    const wellFormed = (s: string) => { try { encodeURIComponent(s); return !s.includes('\u0000'); } catch { return false; } };
    const clean = (v: unknown): boolean => typeof v === 'string' ? wellFormed(v) : v === null || typeof v !== 'object' || Object.entries(v).every(([k, c]) => wellFormed(k) && clean(c));
    const asciiEscaped = (text: string) => text.replace(/[^\x00-\x7f]/g, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
    fc.assert(fc.property(documents, (v) => {
      for (const text of [JSON.stringify(v), asciiEscaped(JSON.stringify(v))]) {
        if (depthOf(v) > JSON_MAX_DEPTH) expect(refusal(text)).toMatch(/nested deeper/);
        else if (!clean(v)) expect(refusal(text)).toMatch(/: (field name )?contains a (NUL character|lone surrogate)/);
        else expect(parseJsonBody(Buffer.from(text))).toEqual(JSON.parse(text));
      }
    }), { seed: 20261123, numRuns: 400 });
  });

  it('findRefusedText: the same check for JSON a service parses from a string field', () => {
    expect(findRefusedText(JSON.parse('{"Statement":[{"Resource":"a\\u0000"}]}'), 'body.document')).toBe('body.document.Statement.0.Resource: contains a NUL character');
    expect(findRefusedText({ ok: ['é', '😀'] }, 'body.document')).toBeUndefined();
  });

  it('refuses prototype poisoning, malformed and empty bodies', () => {
    expect(refusal('{"__proto__":{"admin":true}}')).toMatch(/not valid JSON: .*prototype/);
    expect(refusal('{"constructor":{"prototype":{"admin":true}}}')).toMatch(/not valid JSON: .*prototype/);
    expect(refusal('{"a":')).toMatch(/^request body is not valid JSON/);
    expect(refusal('')).toMatch(/empty/);
    // a raw (unescaped) NUL is not JSON at all
    expect(refusal('{"a":"\u0000"}')).toMatch(/^request body is not valid JSON/);
  });
});

describe('input guard over HTTP', () => {
  let gw: TestGateway;
  let platform: string;
  let account: TestAccount;
  let thingId: string;
  beforeAll(async () => {
    gw = await startTestGateway();
    platform = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin', 'notification-publisher'] });
    account = await createAccount(gw);
    thingId = (await enrollDevice(gw, account)).thingId;
  });
  afterAll(() => gw?.close());

  const raw = (body: Buffer) => body as unknown as string; // fetch sends a Buffer as is

  it('body: NUL, lone surrogate and invalid UTF-8 are a 400 naming the field; valid unicode round-trips', async () => {
    let b = expectProblem(await gw.http.post('/api/notifications/publish', undefined, {
      token: platform,
      raw: JSON.stringify({ channel: ['in_app'], to: { subscriberId: 'a\u0000' }, template: 'general/message' }),
    }), 400);
    expect(b.detail).toBe('body.to.subscriberId: contains a NUL character');
    b = expectProblem(await gw.http.post('/platform/v1/accounts', { name: 'x\ud800' }, { token: platform }), 400);
    expect(b.detail).toMatch(/^body\.name: contains a lone surrogate/);
    b = expectProblem(await gw.http.post('/platform/v1/accounts', undefined, { token: platform, raw: raw(bytes('{"name":"caf', [0xe9], '"}')) }), 400);
    expect(b.detail).toBe('body.name: is not valid UTF-8');

    const name = 'Ünïcødé 😀 \u202eRTL e\u0301 \uffff';
    const created = await gw.http.post('/platform/v1/accounts', undefined, { token: platform, raw: '{"name":"Ünïcødé \\ud83d\\ude00 \\u202eRTL e\\u0301 \\uffff"}' });
    expect(created.status).toBe(201);
    expect((await gw.http.get(`/platform/v1/accounts/${created.body.id}`, { token: platform })).body.name).toBe(name);
  });

  it('twin desired: keys are checked too, and nesting is limited', async () => {
    const url = `/api/v1/things/${thingId}/twin/desired`;
    let b = expectProblem(await gw.http.put(url, { desired: { 'a\u0000b': 1 } }, { token: account.operator }), 400);
    expect(b.detail).toBe('body.desired["a\\u0000b"]: field name contains a NUL character');
    // root object + desired + arrays: exactly the limit is accepted, one more is refused
    const inner = (arrays: number) => `{"desired":{"a":${nested(arrays)}}}`;
    expect((await gw.http.put(url, undefined, { token: account.operator, raw: inner(JSON_MAX_DEPTH - 2) })).status).toBe(200);
    b = expectProblem(await gw.http.put(url, undefined, { token: account.operator, raw: inner(JSON_MAX_DEPTH - 1) }), 400);
    expect(b.detail).toBe(`request body is nested deeper than ${JSON_MAX_DEPTH} levels`);
    b = expectProblem(await gw.http.put(url, undefined, { token: account.operator, raw: inner(5000) }), 400);
    expect(b.title).toBe('Malformed JSON');
  });

  it('+json media types get the same parser; __proto__ is refused', async () => {
    const b = expectProblem(await gw.http.post('/platform/v1/accounts', { name: '\u0000' }, { token: platform, headers: { 'content-type': 'application/merge-patch+json' } }), 400);
    expect(b.detail).toBe('body.name: contains a NUL character');
    const ok = await gw.http.post('/platform/v1/accounts', { name: 'plus json' }, { token: platform, headers: { 'content-type': 'application/vnd.example+json; charset=utf-8' } });
    expect(ok.status).toBe(201);
    expectProblem(await gw.http.post('/platform/v1/accounts', undefined, { token: platform, raw: '{"name":"p","__proto__":{"x":1}}' }), 400);
  });

  it('query and params: NUL and percent-escapes that are not UTF-8 are a 400 naming the parameter', async () => {
    let b = expectProblem(await gw.http.get('/platform/v1/accounts?after=%00', { token: platform }), 400);
    expect(b.detail).toBe('query.after: contains a NUL character');
    b = expectProblem(await gw.http.get('/platform/v1/accounts?limit=%ff', { token: platform }), 400);
    expect(b.detail).toBe('query.limit: has a percent-encoding that is not valid UTF-8');
    b = expectProblem(await gw.http.get('/platform/v1/accounts?x=%ED%A0%80', { token: platform }), 400);
    expect(b.detail).toBe('query.x: has a percent-encoding that is not valid UTF-8');
    b = expectProblem(await gw.http.get('/platform/v1/accounts?%ff=1', { token: platform }), 400);
    expect(b.detail).toMatch(/^query: parameter name "%ff"/);
    // valid escapes (and a literal %25) are fine
    expect((await gw.http.get('/healthz?note=%E2%82%AC%25&x=a+b')).status).toBe(200);

    b = expectProblem(await gw.http.get(`/platform/v1/accounts/${crypto.randomUUID().slice(0, 8)}%00`, { token: platform }), 400);
    expect(b.detail).toBe('params.accountId: contains a NUL character');
    // checked before authentication, whose policy layers may look params up
    b = expectProblem(await gw.http.get(`/iam/v1/accounts/%00/credentials`), 400);
    expect(b.detail).toBe('params.accountId: contains a NUL character');
  });
});
