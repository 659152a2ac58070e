import type { CertificateUse, Gateway } from '../gateway.js';

/** how often each node reloads the serials awaiting their first use */
export const FIRST_USE_RELOAD_MS = 60_000;
/**
 * A certificate this young (from its notBefore, which the PKI sets 5 minutes back) is always asked
 * about in the database: a renewal on another node since the last reload is then never missed.
 */
export const FIRST_USE_FRESH_MS = 15 * 60_000;

const normalize = (hex: string) => hex.toLowerCase().replace(/^0+(?=.)/, '');

/** how long a young certificate's question waits for others to share its query */
const ASK_BATCH_MS = 100;

/**
 * The connect path's certificate first-use check without a round trip in the common case. Every
 * accepted CONNECT reports its certificate (`used`); almost never is it a renewed certificate
 * awaiting its first use. Each node keeps the set of serials awaiting first use (few: renewals
 * not yet used), reloaded every FIRST_USE_RELOAD_MS, and asks the database (the rotation's `used`)
 * only for a serial in the set, a certificate younger than FIRST_USE_FRESH_MS (issued after the
 * last reload, maybe on another node), or while the set is not loaded. A renewal always issues a
 * new certificate, so no renewed certificate is missed; the older ones are revoked on first use as before.
 * The young certificates' questions (a connect storm of newly enrolled or renewed devices) are
 * asked together, one query per ASK_BATCH_MS, and only a serial found awaiting goes on to the
 * rotation service.
 */
export class FirstUseFilter implements CertificateUse {
  private awaiting?: Set<string>;
  private timer?: NodeJS.Timeout;
  /** young certificates' serials waiting for the next batched question */
  private asking?: { serials: Set<string>; answer: Promise<Set<string>> };

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
    if (this.awaiting && !this.awaiting.has(hex)) {
      if (!fresh) return;
      // young, maybe renewed on another node since the last reload: asked with the others of this moment
      if (!(await this.awaitingNow(hex))) return;
    }
    await this.inner.used(thingId, serial, notBefore);
    this.awaiting?.delete(hex);
  }

  /** Does this serial await its first use? One query for all the serials asked within ASK_BATCH_MS. */
  private async awaitingNow(hex: string): Promise<boolean> {
    if (!this.asking) {
      const serials = new Set<string>();
      const answer = new Promise<void>((resolve) => setTimeout(resolve, ASK_BATCH_MS)).then(async () => {
        this.asking = undefined;
        const rows = await this.gw.sql<{ serial: string }[]>`
          select serial from device_certificates where awaiting_first_use and not revoked and ltrim(lower(serial), '0') = any(${[...serials]}::text[])`;
        return new Set(rows.map((r) => normalize(r.serial)));
      });
      this.asking = { serials, answer };
    }
    this.asking.serials.add(hex);
    return (await this.asking.answer).has(hex);
  }
}
