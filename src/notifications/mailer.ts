import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';

export interface Mail {
  to: string;
  subject: string;
  text: string;
  html: string;
}

/**
 * Outgoing email. With SMTP_URL: nodemailer over SMTP. Without it: the development mailbox, one
 * RFC 5322 `.eml` file per message under `${DATA_DIR}/mailbox/` (README: how to read it).
 */
export class Mailer {
  private readonly transport: Transporter;
  readonly mailboxDir?: string;

  constructor(private readonly config: Config, log: Logger) {
    if (config.SMTP_URL) {
      this.transport = nodemailer.createTransport(config.SMTP_URL);
    } else {
      this.mailboxDir = path.join(config.DATA_DIR, 'mailbox');
      this.transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
      if (!config.embeddedDatabase) log.warn({ mailbox: this.mailboxDir }, 'SMTP_URL is not set: email goes to the development mailbox directory');
    }
  }

  async send(mail: Mail): Promise<{ messageId: string }> {
    const info = await this.transport.sendMail({ from: this.config.MAIL_FROM, to: mail.to, subject: mail.subject, text: mail.text, html: mail.html });
    if (this.mailboxDir) {
      const message = (info as unknown as { message: Buffer }).message;
      await fs.promises.mkdir(this.mailboxDir, { recursive: true });
      const name = `${new Date().toISOString().replace(/[:.]/g, '-')}-${crypto.randomBytes(4).toString('hex')}.eml`;
      await fs.promises.writeFile(path.join(this.mailboxDir, name), message);
    }
    return { messageId: String(info.messageId ?? '') };
  }

  close(): void {
    this.transport.close();
  }
}
