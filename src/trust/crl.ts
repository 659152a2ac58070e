import type { CrlSource, Gateway } from '../gateway.js';
import type { Db } from '../db/client.js';
import { toPem } from '../pki/pki.js';

/** A CRL is valid for a week; the hourly refresh job re-signs it a day before that ends. */
export const CRL_VALIDITY_SECONDS = 7 * 86_400;
const REFRESH_AFTER_SECONDS = 6 * 86_400;

interface CrlRow { number: number; der: Buffer }

/**
 * The device CA's CRL, kept in Postgres (one row) so every node serves the same list. It is
 * regenerated inside the revoking transaction (the revoked flag and the CRL commit together)
 * and cached per node; other nodes drop their cache on the `pki.crl-changed` broadcast.
 */
export class CrlService implements CrlSource {
  readonly changedTopic = 'pki.crl-changed' as const;
  private cached?: { pem: string; der: Buffer; number: number };

  constructor(private readonly gw: Gateway) {
    gw.cluster.on<{ number: number }>(this.changedTopic, ({ number }) => {
      if (!this.cached || this.cached.number < number) this.cached = undefined;
    });
  }

  async current(): Promise<{ pem: string; der: Buffer; number: number }> {
    if (this.cached) return this.cached;
    let [row] = await this.gw.sql<CrlRow[]>`select number, der from crl`;
    if (!row) row = await this.gw.sql.begin((tx) => this.regenerate(tx, true));
    this.cached = { der: row.der, pem: toPem(row.der, 'X509 CRL'), number: row.number };
    return this.cached;
  }

  /**
   * Signs a new CRL with every revoked serial and stores it; run it in the transaction that
   * revoked (it sees that transaction's rows). The row lock serialises concurrent revocations.
   * Call `announce` after commit.
   */
  async regenerate(db: Db, onlyIfMissing = false): Promise<CrlRow> {
    await db`insert into crl (id, number, der) values (true, 0, '') on conflict do nothing`;
    const [locked] = await db<CrlRow[]>`select number, der from crl for update`;
    if (onlyIfMissing && locked.number > 0) return locked;
    const entries = await db<{ serial: string; revoked_at: Date }[]>`
      select serial, revoked_at from device_certificates where revoked order by revoked_at`;
    const number = locked.number + 1;
    const { der } = await this.gw.pki.createCrl(entries.map((e) => ({ serial: e.serial, revokedAt: e.revoked_at })), number, CRL_VALIDITY_SECONDS);
    await db`update crl set number = ${number}, der = ${der}, updated_at = now()`;
    return { number, der };
  }

  /** Tells every node (this one first, awaited: the broker reloads its TLS context) of a new CRL. */
  async announce(number: number): Promise<void> {
    this.cached = undefined;
    await this.gw.cluster.broadcast(this.changedTopic, { number });
  }

  /** Hourly job: re-sign before nextUpdate passes, even when nothing was revoked. */
  async refreshIfOld(): Promise<void> {
    const [row] = await this.gw.sql<{ stale: boolean }[]>`
      select updated_at < now() - make_interval(secs => ${REFRESH_AFTER_SECONDS}) as stale from crl`;
    if (row && !row.stale) return;
    const { number } = await this.gw.sql.begin((tx) => this.regenerate(tx));
    await this.announce(number);
  }
}
