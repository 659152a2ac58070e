import type { Gateway } from '../gateway.js';

/** daily sweep: warns accounts of device certificates expiring soon */
export const CERTIFICATE_EXPIRY_JOB = 'trust.certificate-expiry';
/** certificates warned of per transaction */
const BATCH = 500;
const DAY_MS = 86_400_000;

interface Expiring { serial: string; thing_id: string; not_after: Date; account_id: string; device_serial: string }

/**
 * Expiry warnings (issue 18, item 4): each valid certificate of a non-revoked thing that expires
 * within CERT_EXPIRY_WARNING_DAYS, and is the thing's latest (no renewal of it exists yet), is
 * marked `expiry_warned_at` and announced as a `thing.certificateExpiring` domain event in one
 * transaction; the notifications domain turns the event into the account's notification
 * (`device/certificate-expiring`, once per event id). Running it again warns of nothing twice.
 */
export class CertificateExpiryWarnings {
  constructor(private readonly gw: Gateway) {}

  /** Returns how many certificates were warned of. */
  async run(): Promise<number> {
    let total = 0;
    for (;;) {
      const now = this.gw.clock.now();
      const horizon = new Date(now.getTime() + this.gw.config.CERT_EXPIRY_WARNING_DAYS * DAY_MS);
      const warned = await this.gw.actors.run(async (uow) => {
        // skip locked: two nodes running the sweep at once share the work instead of repeating it
        const rows = await uow.sql<Expiring[]>`
          with due as (
            select c.serial from device_certificates c join things t on t.id = c.thing_id
            where not c.revoked and c.expiry_warned_at is null and c.not_after > ${now} and c.not_after <= ${horizon}
              and t.revoked_at is null
              -- a renewal (a later valid certificate of the thing, used or not) supersedes it; by
              -- creation, not not_after (whole seconds: a renewal of the same second would tie)
              and not exists (
                select 1 from device_certificates newer
                where newer.thing_id = c.thing_id and not newer.revoked and newer.created_at > c.created_at)
            order by c.not_after limit ${BATCH}
            for update of c skip locked)
          update device_certificates c set expiry_warned_at = ${now}
          from due, things t
          where c.serial = due.serial and t.id = c.thing_id
          returning c.serial, c.thing_id, c.not_after, t.account_id, t.serial as device_serial`;
        for (const r of rows) {
          await uow.emit('thing', r.thing_id, {
            type: 'thing.certificateExpiring', thingId: r.thing_id, serial: r.serial, deviceSerial: r.device_serial, notAfter: r.not_after.toISOString(),
          }, r.account_id);
        }
        return rows.length;
      });
      total += warned;
      if (warned < BATCH) return total;
    }
  }
}
