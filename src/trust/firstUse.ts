import type { CertificateUse, Gateway } from '../gateway.js';

/** how often each node reloads the serials awaiting their first use */
export const FIRST_USE_RELOAD_MS = 60_000;
/**
 * A certificate this young (from its notBefore, which the PKI sets 5 minutes back) is always asked
 * about in the database: a renewal on another node since the last reload is then never missed.
 */
export const FIRST_USE_FRESH_MS = 15 * 60_000;

const normalize = (hex: string) => hex.toLowerCase().replace(/^0+(?=.)/, '');

/**
 * The connect path's certificate first-use check without a round trip in the common case. Every
 * accepted CONNECT reports its certificate (`used`); almost never is it a renewed certificate
 * awaiting its first use. Each node keeps the set of serials awaiting first use (few: renewals
 * not yet used), reloaded every FIRST_USE_RELOAD_MS, and asks the database (the rotation's `used`)
 * only for a serial in the set, a certificate younger than FIRST_USE_FRESH_MS (issued after the
 * last reload, maybe on another node), or while the set is not loaded. A renewal always issues a
 * new certificate, so no renewed certificate is missed; the older ones are revoked on first use as before.
 */
export class FirstUseFilter implements CertificateUse {
  private awaiting?: Set<string>;
  private timer?: NodeJS.Timeout;

  constructor(private readonly gw: Gateway, private readonly inner: CertificateUse) {}

  async start(): Promise<void> {
    await this.reload();
    this.timer = setInterval(() => void this.reload(), FIRST_USE_RELOAD_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async reload(): Promise<void> {
    try {
      const rows = await this.gw.sql<{ serial: string }[]>`select serial from device_certificates where awaiting_first_use and not revoked`;
      this.awaiting = new Set(rows.map((r) => normalize(r.serial)));
    } catch (err) {
      // every connect asks the database until the next reload works
      this.awaiting = undefined;
      this.gw.log.error({ err }, 'certificates awaiting first use not loaded');
    }
  }

  async used(thingId: string, serial: string, notBefore?: Date): Promise<void> {
    const hex = normalize(serial);
    const fresh = !notBefore || notBefore.getTime() > Date.now() - FIRST_USE_FRESH_MS;
    if (this.awaiting && !this.awaiting.has(hex) && !fresh) return;
    await this.inner.used(thingId, serial, notBefore);
    this.awaiting?.delete(hex);
  }
}
