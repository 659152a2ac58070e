import fs from 'node:fs';
import path from 'node:path';

/** What an enrolled simulated device keeps (the enrollment response), one JSON file per serial. */
export interface DeviceCredentials {
  thingId: string;
  serial: string;
  certificate: string;
  privateKey: string;
  caBundlePem: string;
  mqttBrokerUrl: string;
  mqttBrokerPort: number;
}

export interface GroupFile {
  baseUrl: string;
  accountId: string;
  claimGroupId: string;
  sharedSecret: string;
}

/** The credentials folder: `group.json` (claim group) and `devices/<serial>.json`, private (0600). */
export class CredentialStore {
  constructor(readonly dir: string) {
    fs.mkdirSync(path.join(dir, 'devices'), { recursive: true, mode: 0o700 });
  }

  readGroup(): GroupFile | undefined {
    const file = path.join(this.dir, 'group.json');
    return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as GroupFile) : undefined;
  }

  writeGroup(group: GroupFile): void {
    fs.writeFileSync(path.join(this.dir, 'group.json'), JSON.stringify(group, null, 2), { mode: 0o600 });
  }

  readDevice(serial: string): DeviceCredentials | undefined {
    const file = this.deviceFile(serial);
    return fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as DeviceCredentials) : undefined;
  }

  writeDevice(creds: DeviceCredentials): void {
    fs.writeFileSync(this.deviceFile(creds.serial), JSON.stringify(creds), { mode: 0o600 });
  }

  /** A revoked device's credentials are useless: removed so the next run enrolls a fresh one. */
  removeDevice(serial: string): void {
    fs.rmSync(this.deviceFile(serial), { force: true });
  }

  /**
   * Serials the gateway revoked (`revoked.json`): a revoked thing can never enroll again, so the
   * next run skips these serials and enrolls new ones in their place.
   */
  revokedSerials(): Set<string> {
    const file = path.join(this.dir, 'revoked.json');
    return new Set(fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')) as string[]) : []);
  }

  markRevoked(serial: string): void {
    const all = this.revokedSerials();
    all.add(serial);
    fs.writeFileSync(path.join(this.dir, 'revoked.json'), JSON.stringify([...all].sort()), { mode: 0o600 });
    this.removeDevice(serial);
  }

  private deviceFile(serial: string): string {
    return path.join(this.dir, 'devices', `${serial.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
  }
}
