import { describe, expect, it } from 'vitest';
import { inQuietHours, isTimeZone } from '../../src/notifications/service.js';
import { escapeHtml, localize, MissingVariables, render } from '../../src/notifications/templates.js';

describe('quiet hours', () => {
  const q = (start: string, end: string, timeZone: string) => ({ start, end, timeZone });
  it('evaluates the window in the recipient\'s time zone', () => {
    const at = new Date('2026-01-15T21:30:00Z'); // 22:30 in Berlin (CET), 16:30 in New York
    expect(inQuietHours(q('22:00', '23:00', 'Europe/Berlin'), at)).toBe(true);
    expect(inQuietHours(q('22:00', '23:00', 'America/New_York'), at)).toBe(false);
    expect(inQuietHours(q('16:00', '17:00', 'America/New_York'), at)).toBe(true);
  });
  it('windows across midnight', () => {
    const w = q('22:00', '07:00', 'Europe/Berlin');
    expect(inQuietHours(w, new Date('2026-01-15T22:30:00Z'))).toBe(true); // 23:30
    expect(inQuietHours(w, new Date('2026-01-16T05:59:00Z'))).toBe(true); // 06:59
    expect(inQuietHours(w, new Date('2026-01-16T06:00:00Z'))).toBe(false); // 07:00, end excluded
    expect(inQuietHours(w, new Date('2026-01-15T20:59:00Z'))).toBe(false); // 21:59
    expect(inQuietHours(w, new Date('2026-01-15T21:00:00Z'))).toBe(true); // 22:00, start included
  });
  it('follows daylight saving time', () => {
    const w = q('08:00', '09:00', 'Europe/Berlin');
    expect(inQuietHours(w, new Date('2026-01-15T07:30:00Z'))).toBe(true); // CET: 08:30
    expect(inQuietHours(w, new Date('2026-07-15T07:30:00Z'))).toBe(false); // CEST: 09:30
    expect(inQuietHours(w, new Date('2026-07-15T06:30:00Z'))).toBe(true); // CEST: 08:30
  });
  it('recognizes IANA zones', () => {
    expect(isTimeZone('Asia/Kolkata')).toBe(true);
    expect(isTimeZone('Mars/Olympus')).toBe(false);
  });
});

describe('templates', () => {
  const t = { subject: 'Hi {{name}}\r\nBcc: x@y', title: '{{name}} / {{a.b}}', bodyText: '{{name}} {{n}}', bodyHtml: '<p title="{{name}}">{{name}} {{obj}}</p>' };
  it('escapes variables in HTML only, keeps subjects on one line, reads paths and non-strings', () => {
    const r = render(t, { name: '<img src=x onerror="alert(1)">', a: { b: 7 }, n: 3, obj: { k: '<v>' } }, { strict: true });
    expect(r.html).toBe('<p title="&#60;img src&#61;x onerror&#61;&#34;alert(1)&#34;&#62;">&#60;img src&#61;x onerror&#61;&#34;alert(1)&#34;&#62; {&#34;k&#34;:&#34;&#60;v&#62;&#34;}</p>');
    expect(r.subject).toBe('Hi <img src=x onerror="alert(1)"> Bcc: x@y');
    expect(r.title).toBe('<img src=x onerror="alert(1)"> / 7');
    expect(r.text).toBe('<img src=x onerror="alert(1)"> 3');
  });
  it('strict rendering names missing variables; lenient rendering leaves them empty', () => {
    expect(() => render(t, { name: 'x' }, { strict: true })).toThrow(MissingVariables);
    expect(render(t, { name: 'x' }, { strict: false }).title).toBe('x /');
    expect(() => render(t, { name: 'x', a: { b: 1 }, n: 1, obj: 1, __proto__: { polluted: 1 } }, { strict: true })).not.toThrow();
    expect(() => render({ ...t, bodyText: '{{constructor}}' }, { name: 'x', a: { b: 1 }, n: 1, obj: 1 }, { strict: true })).toThrow(MissingVariables);
  });
  it('escapeHtml covers the attribute-breaking characters', () => {
    expect(escapeHtml(`&<>"'\`=`)).toBe('&#38;&#60;&#62;&#34;&#39;&#96;&#61;');
  });
  it('localizes display names by Accept-Language', () => {
    const names = { en: 'Devices', de: 'Geräte', 'pt-BR': 'Dispositivos' };
    expect(localize(names, 'de-AT,de;q=0.9')).toBe('Geräte');
    expect(localize(names, 'fr;q=0.9, pt-BR;q=0.8')).toBe('Dispositivos');
    expect(localize(names, 'pt')).toBe('Dispositivos');
    expect(localize(names, 'ja')).toBe('Devices');
    expect(localize(names, undefined)).toBe('Devices');
    expect(localize(names, 'de;q=0, en')).toBe('Devices');
  });
});
