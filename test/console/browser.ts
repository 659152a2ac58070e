import fs from 'node:fs';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const hasChromium = fs.existsSync(CHROMIUM);
if (!hasChromium) console.log(`console end-to-end tests skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_PATH)`);

/** Screenshots of the pages, for a person to look at (git-ignored). */
export const SCREENSHOT_DIR = path.resolve('test-output/console');

export async function launchChromium(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** A page that records every uncaught error (a test asserts there were none). */
export async function openPage(browser: Browser): Promise<{ page: Page; errors: string[] }> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  return { page, errors };
}

/** Fills the console's sign-in form (development token issuer) and submits it. */
export async function signIn(page: Page, realm: string, sub: string, roles = 'viewer'): Promise<void> {
  await page.fill('#realm', realm);
  await page.fill('#sub', sub);
  await page.fill('#roles', roles);
  await page.click('#signin-button');
  await page.waitForSelector('#app:not(.hidden)');
}

export async function screenshot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOT_DIR, `${name}.png`), fullPage: true });
}

/** Waits until the element's text content equals `text`. */
export const textIs = (page: Page, selector: string, text: string) =>
  page.waitForFunction(([s, t]) => (globalThis as any).document.querySelector(s)?.textContent === t, [selector, text] as const);

/** Waits until the element's text content contains `text`. */
export const textHas = (page: Page, selector: string, text: string) =>
  page.waitForFunction(([s, t]) => ((globalThis as any).document.querySelector(s)?.textContent ?? '').includes(t), [selector, text] as const);
