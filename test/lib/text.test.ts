import { describe, expect, it } from 'vitest';
import { isStorableText, unstorableField } from '../../src/lib/text.js';

describe('storable text', () => {
  it('accepts Unicode text, astral characters (surrogate pairs) included', () => {
    for (const s of ['', 'SN-1', 'Grüße', '设备', 'sensor 😀', '\ud83d\ude00']) expect(isStorableText(s)).toBe(true);
  });

  it('refuses NUL and unpaired surrogates, wherever they are', () => {
    for (const s of ['a\u0000b', '\ud800', 'x\ud800', '\udc00y', '\ude00\ud83d', 'ok\ud83d']) expect(isStorableText(s)).toBe(false);
  });

  it('names the first bad string field and ignores other values', () => {
    expect(unstorableField({ manufacturer: 'Acme', serial: 'X\ud800', model: '\u0000', count: 3 })).toBe('serial');
    expect(unstorableField({ manufacturer: 'Acme', nested: { serial: '\ud800' }, count: 3 })).toBeUndefined();
  });
});
