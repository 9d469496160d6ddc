// viewer.test.mjs — the Memory Viewer in a real browser (Debian's Chromium driven by
// playwright-core from web/node_modules), against `hbm view` serving the fixture logdir of
// tests/test_viewer_api.c. Run by tests/viewer_browser.sh, which starts and stops the servers.
//
// Checks: the default view opens the largest module; the peak shown equals `hbm report
// --json`'s peak_bytes (the API's summary when hbm report cannot read the file); hovering a
// bar shows its card; switching run and memory type; searching an op in the allocation
// timeline; OOM markers with their diagnosis; corrupt and truncated profiles; the comparison;
// an empty logdir that fills while the page is open; and that the page requests nothing but
// its own server. Screenshots go to --artifacts.
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../web/package.json'));
const { chromium } = require('playwright-core');

function parseArgs(argv) {
  const out = {};
  for (let i = 2; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  return out;
}
const args = parseArgs(process.argv);
const RUN_PLANS = '2026_01_02_10_00_00';
const RUN_TRAIN = '2026_01_01_09_00_00';
const RUN_BROKEN = '2026_01_01_08_00_00';
const PLAN_A = 'module_0001.jit_train_step.hbmtrace';
const PLAN_B = 'module_0002.jit_eval_step.hbmtrace';
const TRAIN = 'testhost.4242.hbmtrace';

let passed = 0;
let failed = 0;
const timings = {};

function check(cond, what) {
  if (cond) {
    passed++;
    console.log(`ok - ${what}`);
  } else {
    failed++;
    console.log(`not ok - ${what}`);
  }
}

async function apiJson(base, endpoint, query) {
  const res = await fetch(`${base}/api/${endpoint}?${new URLSearchParams(query)}`);
  return res.json();
}

// `hbm report --json FILE`'s peak_bytes for the first space, or null when it cannot say.
function reportPeak(file) {
  try {
    const out = execFileSync(args.hbm, ['report', '--json', file], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 20000 });
    const json = JSON.parse(out);
    const first = Array.isArray(json) ? json[0] : json.spaces ? json.spaces[0] : json;
    return typeof first?.peak_bytes === 'number' ? first.peak_bytes : null;
  } catch {
    return null;
  }
}

async function waitLoads(page, before) {
  await page.waitForFunction((n) => window.hbmViewer && window.hbmViewer.loads > n, before, { timeout: 20000 });
}

async function loads(page) {
  return page.evaluate(() => window.hbmViewer?.loads ?? 0);
}

async function shot(page, name, selector) {
  const file = path.join(args.artifacts, `${name}.png`);
  if (selector) {
    // a sticky bar would cover the top of a tall element in its screenshot
    await page.addStyleTag({ content: '.topbar { position: static !important; }' });
    await page.locator(selector).screenshot({ path: file });
  } else {
    await page.evaluate(() => window.scrollTo(0, 0)); // else the sticky bar lands mid-page
    await page.screenshot({ path: file, fullPage: true });
  }
}

async function main() {
  mkdirSync(args.artifacts, { recursive: true });
  // A fresh profile directory each run (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(args.profiledir, {
    executablePath: args.chromium || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = await context.newPage();
    const foreign = [];
    const errors = [];
    page.on('request', (r) => { if (!r.url().startsWith(args.url) && !r.url().startsWith('data:')) foreign.push(r.url()); });
    page.on('pageerror', (e) => errors.push(e.message));
    // (a 500 for the corrupt profile is expected, and the browser logs it as a console error)
    page.on('console', (m) => { if (m.type() === 'error' && !m.text().includes('status of 500')) errors.push(m.text()); });

    // 1. The default view: newest run, its largest module.
    const t0 = Date.now();
    await page.goto(args.url);
    await waitLoads(page, 0);
    timings.first_view_ms = Date.now() - t0;
    check(await page.locator('#profile-select').inputValue() === PLAN_A, 'the largest module is shown first');
    check(await page.locator('#profile-select option').count() === 2, 'both modules are listed');
    const summary = await apiJson(args.url, 'summary', { run: RUN_PLANS, profile: PLAN_A, space: 0 });
    const reported = reportPeak(path.join(args.logdir, 'plugins/profile', RUN_PLANS, PLAN_A));
    const expected = reported ?? summary.peak_bytes;
    console.log(`# peak to match: ${expected} (${reported != null ? 'hbm report --json' : 'the API summary; hbm report could not read the file'})`);
    const shown = Number(await page.locator('#stat-peak .value').getAttribute('data-bytes'));
    check(shown === expected, `the peak shown (${shown}) equals peak_bytes (${expected})`);
    check(reported == null || reported === summary.peak_bytes, 'hbm report and the API agree on the peak');
    check((await page.locator('#stat-padding .value').textContent()) !== '0 B', 'padding overhead is shown');
    await shot(page, 'plan_overview');

    // 2. Hover the largest bar of "by size": its card.
    const bySize = await apiJson(args.url, 'buffers_at_peak', { run: RUN_PLANS, profile: PLAN_A, order: 'size' });
    const over = page.locator('#bars-size .u-over');
    await over.scrollIntoViewIfNeeded();
    const box = await over.boundingBox();
    const n = bySize.buffers.length;
    await page.mouse.move(box.x + box.width / (2 * n), box.y + box.height - 5);
    await page.waitForFunction((id) => document.querySelector('#buffer-card')?.dataset.id === String(id) && document.querySelector('#buffer-card [data-field="padding"]'), bySize.buffers[0].id, { timeout: 5000 });
    const cardOp = await page.locator('#buffer-card [data-field="op"]').textContent();
    check(cardOp === bySize.buffers[0].op, `hovering the largest bar shows its card (${cardOp})`);
    const cardShape = await page.locator('#buffer-card [data-field="shape"]').textContent();
    check(cardShape === bySize.buffers[0].shape, 'the card shows the shape');
    check(/×/.test(await page.locator('#buffer-card [data-field="expansion"]').textContent()), 'the card shows the expansion');
    await page.mouse.down();
    await page.mouse.up(); // a click pins the card, so it stays for the screenshot
    await page.waitForSelector('#buffer-card .pin', { timeout: 5000 });
    await shot(page, 'buffer_card', '#peak-panel');
    await page.click('#peak-table-wrap summary');
    await page.fill('#peak-filter', 'Arg_');
    await page.waitForFunction(() => document.querySelectorAll('#peak-table tbody tr').length > 0);
    const argRows = bySize.buffers.filter((b) => (b.op || '').toLowerCase().includes('arg_') || (b.shape || '').toLowerCase().includes('arg_') || (b.group || '').toLowerCase().includes('arg_')).length;
    check(await page.locator('#peak-table tbody tr').count() === argRows, `the table filters the buffers (${argRows} rows for "Arg_")`);
    await page.fill('#peak-filter', '');

    // 3. The timeline: hover names the op at the point; zoom asks for detail.
    const tl = page.locator('#timeline-chart .u-over');
    await tl.scrollIntoViewIfNeeded();
    const tbox = await tl.boundingBox();
    await page.mouse.move(tbox.x + tbox.width / 2, tbox.y + tbox.height / 2);
    await page.waitForFunction(() => document.querySelector('#timeline-hover')?.dataset.op, null, { timeout: 5000 });
    check((await page.locator('#timeline-hover').textContent()).includes('step'), 'timeline hover shows the step and op');
    const zoomStart = Date.now();
    await page.mouse.wheel(0, -400);
    await page.waitForFunction(() => window.hbmViewer.views.timeline.range[0] > 0 || window.hbmViewer.views.timeline.range[1] < window.hbmViewer.views.timeline.nSteps, null, { timeout: 5000 });
    timings.timeline_zoom_ms = Date.now() - zoomStart;
    check(true, `timeline wheel zoom (${timings.timeline_zoom_ms} ms)`);

    // 4. Compare with the other module.
    let before = await loads(page);
    await page.selectOption('#compare-select', JSON.stringify([RUN_PLANS, PLAN_B]));
    await page.waitForSelector('#compare-metrics', { timeout: 10000 });
    check(await page.locator('#compare-ops tbody tr').count() > 0, 'the comparison lists ops');
    await shot(page, 'compare', '#compare-panel');
    await page.selectOption('#compare-select', '');

    // 5. Switch run (runtime profile with an OOM), then memory type.
    before = await loads(page);
    await page.selectOption('#run-select', RUN_TRAIN);
    await waitLoads(page, before);
    const train = await apiJson(args.url, 'summary', { run: RUN_TRAIN, profile: TRAIN, space: 0 });
    check(Number(await page.locator('#stat-peak .value').getAttribute('data-bytes')) === train.peak_bytes, 'after switching run the peak is the runtime profile\'s');
    check(await page.locator('#oom-panel').isVisible(), 'the OOM panel is shown');
    check((await page.locator('#oom-list').textContent()).includes('RESOURCE_EXHAUSTED'), 'the OOM diagnosis is shown');
    await shot(page, 'runtime_overview');
    before = await loads(page);
    await page.selectOption('#space-select', '1');
    await waitLoads(page, before);
    const host = await apiJson(args.url, 'summary', { run: RUN_TRAIN, profile: TRAIN, space: 1 });
    check(host.space_name === 'Host', 'space 1 is Host');
    check(Number(await page.locator('#stat-peak .value').getAttribute('data-bytes')) === host.peak_bytes, 'after switching memory type the peak is Host\'s');
    before = await loads(page);
    await page.selectOption('#space-select', '0');
    await waitLoads(page, before);

    // 6. Search an op in the allocation timeline; hover the OOM marker.
    await page.locator('#alloc-canvas').scrollIntoViewIfNeeded();
    const searchStart = Date.now();
    await page.fill('#alloc-search', 'layer_03/dot');
    await page.waitForFunction(() => Number(document.querySelector('#alloc-canvas').dataset.matched) > 0, null, { timeout: 5000 });
    timings.search_ms = Date.now() - searchStart; // includes the 150 ms typing debounce
    const matches = await apiJson(args.url, 'allocations', { run: RUN_TRAIN, profile: TRAIN, q: 'layer_03/dot', limit: 1 });
    check(Number(await page.locator('#alloc-canvas').getAttribute('data-matched')) === matches.matched, `search finds ${matches.matched} allocations`);
    check((await page.locator('#alloc-matches').textContent()).includes('match'), 'the match count is shown');
    await page.click('#alloc-fit');
    await page.waitForTimeout(300);
    await shot(page, 'alloc_search', '#alloc-panel');
    await page.fill('#alloc-search', '');
    await page.click('#alloc-reset');
    await page.waitForTimeout(300);
    const oomStep = (await apiJson(args.url, 'oom', { run: RUN_TRAIN, profile: TRAIN })).events[0].step;
    const cbox = await page.locator('#alloc-canvas').boundingBox();
    const x = await page.evaluate((s) => window.hbmViewer.views.alloc.X(s), oomStep);
    await page.mouse.move(cbox.x + x, cbox.y + 8);
    await page.waitForSelector('#tooltip:not([hidden])', { timeout: 5000 });
    check((await page.locator('#tooltip').textContent()).includes('OOM'), 'hovering the OOM marker shows the diagnosis');
    await shot(page, 'oom_tooltip', '#alloc-panel');
    await page.click('.oom-live');
    await page.waitForSelector('#peak-back:not([hidden])', { timeout: 5000 });
    const liveThere = await apiJson(args.url, 'buffers_at', { run: RUN_TRAIN, profile: TRAIN, step: oomStep });
    check((await page.locator('#peak-title').textContent()).includes(`${oomStep.toLocaleString('en-US')}`), 'the buffers live at the OOM are shown');
    check(await page.evaluate(() => window.hbmViewer.state.bars.size.length) === liveThere.count, `as many bars as buffers live there (${liveThere.count})`);
    await shot(page, 'buffers_at_oom', '#peak-panel');
    await page.click('#peak-back');

    // 7. Corrupt and truncated profiles.
    before = await loads(page);
    await page.selectOption('#run-select', RUN_BROKEN);
    await waitLoads(page, before);
    before = await loads(page);
    await page.selectOption('#profile-select', 'corrupt.hbmtrace');
    await waitLoads(page, before);
    check(await page.locator('#error-state').isVisible(), 'a corrupt profile shows an error');
    check((await page.locator('#error-state').textContent()).includes('corrupt.hbmtrace'), 'the error names the file');
    await shot(page, 'corrupt');
    before = await loads(page);
    await page.selectOption('#profile-select', 'truncated.hbmtrace');
    await waitLoads(page, before);
    check(await page.locator('#banner').isVisible(), 'a truncated profile shows the loss in a banner');
    await shot(page, 'truncated');

    check(foreign.length === 0, `the page loads nothing from the network (${foreign.join(', ') || 'none'})`);
    check(errors.length === 0, `no errors in the page (${errors.join('; ') || 'none'})`);

    // 8. An empty logdir, then a run appears.
    const empty = await context.newPage();
    await empty.goto(args['empty-url']);
    await empty.waitForSelector('#empty-state:not([hidden])', { timeout: 10000 });
    check((await empty.locator('#empty-state').textContent()).includes('No profiles in this logdir yet'), 'an empty logdir says so');
    await shot(empty, 'empty');
    const runDir = path.join(args['empty-logdir'], 'plugins/profile/2026_03_01_00_00_00');
    mkdirSync(runDir, { recursive: true });
    copyFileSync(path.join(args.logdir, 'plugins/profile', RUN_PLANS, PLAN_B), path.join(runDir, PLAN_B));
    await empty.waitForSelector('#content:not([hidden])', { timeout: 15000 });
    check(await empty.locator('#run-select option').count() === 1, 'a new run appears without a restart');
  } finally {
    await context.close();
  }
  console.log(`# timings ${JSON.stringify(timings)}`);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.log(`not ok - ${err.stack || err}`);
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
