// What every browser acceptance script shares: headless Chromium (Debian's
// /usr/bin/chromium) through playwright-core, steps that assert, screenshot and
// report, polling, and the ending (DONE, or the step that failed and why).
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export class StepFailure extends Error {}

export function assert(cond, message) {
  if (!cond) throw new StepFailure(message);
}

export function required(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`browser test: set ${name}`);
    process.exit(2);
  }
  return v;
}

/** Starts the browser; returns the page and the step helpers bound to it. */
export async function startBrowser(shotDir) {
  mkdirSync(shotDir, { recursive: true });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.setDefaultTimeout(30000);

  /** Screenshots are named by step: 01-login.png, 02-filesystem.png, ... */
  let stepNo = 0;
  let current = '';
  async function shot(name) {
    const file = join(shotDir, `${String(stepNo).padStart(2, '0')}-${name}.png`);
    await page.screenshot({ path: file });
    return file;
  }

  async function step(name, fn) {
    stepNo++;
    current = name;
    const started = Date.now();
    await fn();
    assert(pageErrors.length === 0, `JavaScript errors in the page: ${pageErrors.join('; ')}`);
    await shot(name);
    console.log(`ok ${stepNo} ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  }

  /** Polls `fn` until it returns a truthy value or `seconds` pass; returns the value. */
  async function until(seconds, what, fn) {
    const deadline = Date.now() + seconds * 1000;
    let last;
    for (;;) {
      try {
        last = await fn();
        if (last) return last;
      } catch (e) {
        if (e instanceof StepFailure) throw e;
        last = e.message;
      }
      if (Date.now() > deadline) throw new StepFailure(`waited ${seconds} s for ${what}${last ? ` (last: ${JSON.stringify(last)})` : ''}`);
      await page.waitForTimeout(500);
    }
  }

  /** Runs the steps in `body`; prints DONE, or the failing step, and exits. */
  async function run(body) {
    try {
      await body();
      console.log('DONE');
      await browser.close();
      process.exit(0);
    } catch (e) {
      const why = e instanceof StepFailure ? e.message : e.stack ?? String(e);
      try {
        console.error(`FAILED at step "${current}": ${why}\nscreenshot: ${await shot(`${current}-failed`)}`);
      } catch {
        console.error(`FAILED at step "${current}": ${why}`);
      }
      await browser.close().catch(() => undefined);
      process.exit(1);
    }
  }

  return { page, step, shot, until, run };
}
