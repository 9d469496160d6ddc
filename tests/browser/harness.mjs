// harness.mjs — what the browser tests here share: the command line tests/viewer_browser.sh
// gives them (--name value pairs), "ok"/"not ok" lines and their count, Chromium started by
// playwright-core, and waiting for the page's views (web/src/main.js counts each one it draws
// in window.hbmViewer.loads).
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../web/package.json'));
const { chromium } = require('playwright-core');

export const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];

const tally = { passed: 0, failed: 0 };

export function check(cond, what) {
  if (cond) tally.passed++;
  else tally.failed++;
  console.log(`${cond ? 'ok' : 'not ok'} - ${what}`);
}

// A fresh headless Chromium on args.profiledir (playwright passes it as --user-data-dir).
export function launch(extraArgs = []) {
  return chromium.launchPersistentContext(args.profiledir, {
    executablePath: args.chromium || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', ...extraArgs],
  });
}

export const loads = (page) => page.evaluate(() => window.hbmViewer?.loads ?? 0);

// Until the page has drawn more than `before` views.
export function waitLoads(page, before, timeout = 20000) {
  return page.waitForFunction((n) => window.hbmViewer && window.hbmViewer.loads > n, before, { timeout });
}

// Picks `value` in a <select> and waits for the view it draws (nothing when already chosen).
export async function choose(page, selector, value) {
  if ((await page.locator(selector).inputValue()) === value) return;
  const before = await loads(page);
  await page.selectOption(selector, value);
  await waitLoads(page, before);
}

// Runs the test; an exception is one more failure. Exits 1 when anything failed.
export function run(name, main) {
  main()
    .catch((e) => check(false, e.stack || String(e)))
    .then(() => {
      console.log(`# ${name}: ${tally.passed} passed, ${tally.failed} failed`);
      process.exit(tally.failed ? 1 : 0);
    });
}
