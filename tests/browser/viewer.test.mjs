// viewer.test.mjs — the Memory Viewer in a real browser (Debian's Chromium driven by
// playwright-core from web/node_modules), against `hbm view` serving the fixture logdir of
// tests/test_viewer_api.c. Run by tests/viewer_browser.sh, which starts and stops the servers.
//
// Checks, on the logdir of the main job's steps (scripts/main-job.sh, as scripts/run.sh runs
// them: the seed's plan, then its OOM demo): the page opens on the demo's run with its OOM in
// the first screen, the peak `hbm report LOGDIR --json` gives, the step labels as `hbm report`
// lists the markers ("step 1", "end of step 1 · step 2", never "step 1 1"), whole-number step
// ticks, the demo's buffers not squeezed into the top of the allocation timeline; and on the
// plan (and the fixture plans) that no buffer is drawn over another and the y-axis covers the
// peak. Then, on the fixture logdir: the default view opens the largest module; the peak shown equals `hbm report
// --json`'s peak_bytes (the API's summary when hbm report cannot read the file); hovering a
// bar shows its card; switching run and memory type; searching an op in the allocation
// timeline; OOM markers with their diagnosis; corrupt and truncated profiles; the comparison
// (the diff's tables, both timelines); the devices of a run (selector and summary);
// an empty logdir that fills while the page is open; and that the page requests nothing but
// its own server. Screenshots go to --artifacts.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { args, check, launch, loads, run, waitLoads } from './harness.mjs';

const RUN_PLANS = '2026_01_02_10_00_00';
const RUN_TRAIN = '2026_01_01_09_00_00';
const RUN_BROKEN = '2026_01_01_08_00_00';
const RUN_RMM = '2025_12_30_00_00_00'; // tests/data/profile/small.csv, added by viewer_browser.sh
const PLAN_A = 'module_0001.jit_train_step.hbmtrace';
const PLAN_B = 'module_0002.jit_eval_step.hbmtrace';
const TRAIN = 'testhost.4242.hbmtrace';

const timings = {};

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

// Pairs of rectangles of the allocation timeline that overlap in both steps and rows: one
// would hide the other. `rects` is the page's own data (views.alloc.rects.rects).
function hiddenPairs(rects) {
  const out = [];
  const n = rects.id.length;
  for (let i = 0; i < n; i++) {
    for (let j = i + 1; j < n; j++) {
      const steps = rects.start[i] < rects.end[j] && rects.start[j] < rects.end[i];
      const rows = rects.offset[i] < rects.offset[j] + rects.size[j] && rects.offset[j] < rects.offset[i] + rects.size[i];
      if (steps && rows) out.push([rects.id[i], rects.id[j]]);
    }
  }
  return out;
}

// The whole-number check of the x ticks uPlot computed (its axis splits).
async function xTicks(page) {
  return page.evaluate(() => {
    const u = window.hbmViewer.views.timeline.plot;
    return (u.axes[0]._splits || []).slice();
  });
}

// The allocation timeline of the profile on screen: no buffer hidden by another, every
// buffer drawn one by one (a plan is small), and the stack as tall as the peak.
async function checkNothingHidden(page, what) {
  const alloc = await page.evaluate(() => {
    const a = window.hbmViewer.views.alloc;
    return { rects: a.rects.rects, shown: a.rects.shown, matched: a.rects.matched, extent: a.rects.extent, bands: a.bands };
  });
  const peak = await page.evaluate(() => window.hbmViewer.state.summary.peak_bytes);
  check(alloc.shown === alloc.matched, `${what}: every buffer is drawn (${alloc.shown})`);
  const hidden = hiddenPairs(alloc.rects);
  check(hidden.length === 0, `${what}: no buffer of the plan is hidden by another (${hidden.length ? JSON.stringify(hidden.slice(0, 5)) : 'none'})`);
  check(alloc.extent >= peak, `${what}: the allocation timeline's height (${alloc.extent}) covers the peak (${peak})`);
  return alloc;
}

async function mainJob(context) {
  const logdir = args['mainjob-logdir'];
  const runs = readdirSync(path.join(logdir, 'plugins/profile')).sort();
  const demoRun = runs.find((r) => readdirSync(path.join(logdir, 'plugins/profile', r)).some((f) => !f.startsWith('jit_oom')));
  const planRun = runs.find((r) => r !== demoRun);
  check(runs.length === 2 && demoRun && planRun, `the main job wrote a plan and a demo run (${runs.join(', ')})`);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(args['mainjob-url']);
  await waitLoads(page, 0);
  check(await page.locator('#run-select').inputValue() === demoRun, `the page opens on the demo's run (${demoRun}), not the plan's`);
  const report = JSON.parse(execFileSync(args.hbm, ['report', '--json', logdir], { encoding: 'utf8' }));
  const shown = Number(await page.locator('#stat-peak .value').getAttribute('data-bytes'));
  check(shown === report.peak_bytes, `the peak shown (${shown}) is hbm report ${logdir}'s (${report.peak_bytes})`);
  const oom = page.locator('#oom-panel');
  check(await oom.isVisible(), 'the demo\'s OOM is shown');
  const box = await oom.boundingBox();
  check(box && box.y < 1000, `the OOM is in the first screen (at y=${box && Math.round(box.y)})`);
  const oomText = await page.locator('#oom-list').textContent();
  check(oomText.includes('RESOURCE_EXHAUSTED: Out of memory while trying to allocate 214748364800 bytes.'), 'it is the seed\'s 214748364800-byte OOM');
  check(oomText.includes('cause: request larger than the device'), 'with its cause');
  await shot(page, 'demo_overview');

  // Step labels: the markers `hbm report` lists, each once, a step's end and the next begin
  // on one line.
  const markers = report.markers.map((m) => m.text);
  console.log(`# hbm report's markers: ${JSON.stringify(markers)}`);
  await page.waitForFunction(() => (window.hbmViewer.views.timeline.markerTexts || []).length > 0, null, { timeout: 5000 });
  const texts = (await page.evaluate(() => window.hbmViewer.views.timeline.markerTexts)).map((m) => m.text);
  console.log(`# step labels on the page: ${JSON.stringify(texts)}`);
  check(texts.includes('step 1') && texts.includes('end of step 1 · step 2') && texts.includes('end of step 2'), 'the step labels read "step 1", "end of step 1 · step 2", "end of step 2"');
  check(!texts.some((t) => /\bstep (\d+) \1\b/.test(t)), 'no label repeats its step number ("step 1 1")');
  const onPage = texts.join(' · ').split(' · ');
  check(markers.every((m) => onPage.includes(m)), 'every marker hbm report lists is on the page, "end of step" ones included');
  const ticks = await xTicks(page);
  check(ticks.length > 0 && ticks.every((t) => Number.isInteger(t)), `the step axis has whole-number ticks (${ticks.join(', ')})`);

  // The allocation timeline of the demo: the 16 KiB biases far below the rest no longer push
  // the large buffers into the top of the panel.
  const demoAlloc = await page.evaluate(() => {
    const a = window.hbmViewer.views.alloc;
    const r = a.rects.rects;
    let lowestBig = Infinity;
    for (let i = 0; i < r.id.length; i++) if (r.size[i] >= 1 << 20) lowestBig = Math.min(lowestBig, r.offset[i]);
    return { lowestBig, extent: a.rects.extent };
  });
  check(demoAlloc.lowestBig < 0.05 * demoAlloc.extent, `the demo's large buffers start near the bottom of the allocation timeline (${(100 * demoAlloc.lowestBig / demoAlloc.extent).toFixed(2)}% up)`);
  await page.locator('#alloc-canvas').scrollIntoViewIfNeeded();
  await shot(page, 'demo_alloc', '#alloc-panel');

  // The plan: every allocation in its own band.
  const before = await loads(page);
  await page.selectOption('#run-select', planRun);
  await waitLoads(page, before);
  await checkNothingHidden(page, 'the seed\'s plan');
  const planTicks = await xTicks(page);
  check(planTicks.every((t) => Number.isInteger(t)), `the plan's program-order axis has whole-number ticks (${planTicks.join(', ')})`);
  await page.locator('#alloc-canvas').scrollIntoViewIfNeeded();
  await shot(page, 'plan_alloc', '#alloc-panel');
  await shot(page, 'plan_seed_overview');
  check(errors.length === 0, `no errors on the main job's pages (${errors.join('; ') || 'none'})`);
  await page.close();
}

async function main() {
  mkdirSync(args.artifacts, { recursive: true });
  // A fresh profile directory each run (playwright passes it as --user-data-dir).
  const context = await launch(['--disable-quic', '--disable-component-update', '--disable-sync']);
  try {
    await mainJob(context);
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
    await checkNothingHidden(page, 'the fixture plan');

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
    check(await page.locator('#compare-table tbody tr').count() > 0, 'the comparison lists ops');
    // The same diff as `hbm diff`: each table's rows (and the rest) add up to the change.
    const cmp = await apiJson(args.url, 'compare', { run: RUN_PLANS, profile: PLAN_A, space: 0, b_run: RUN_PLANS, b_profile: PLAN_B });
    for (const table of ['reason', 'op', 'source', 'category', 'shape', 'group', 'buffer']) {
      const sum = cmp.diff[`by_${table}`].reduce((s, r) => s + r.delta, 0) + (cmp.diff[`by_${table}_rest`]?.delta || 0);
      check(sum === cmp.diff.change, `compare: the rows by ${table} add up to the change`);
    }
    await page.click('#compare-tabs .tab[data-table="reason"]');
    check(await page.locator('#compare-table[data-table="reason"] tbody tr').count() > 0, 'compare: the "by reason" tab shows its rows');
    check(await page.locator('#compare-timeline .u-over').count() === 1, 'compare: both timelines drawn in one chart');
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
    // Two runtime profiles in the run: the device selector and the devices' summary.
    await page.waitForSelector('#devices-panel:not([hidden])', { timeout: 10000 });
    const devices = await apiJson(args.url, 'devices', { run: RUN_BROKEN });
    check(await page.locator('#device-select option').count() === devices.count, 'the device selector lists the run\'s devices');
    check((await page.locator('#devices-roles').textContent()).includes(devices.largest.label), 'the devices\' summary names the largest');
    await shot(page, 'devices', '#devices-panel');
    const other = devices.per_device.findIndex((d) => d.profile !== 'truncated.hbmtrace');
    before = await loads(page);
    await page.locator('.device-bar').nth(other).click();
    await waitLoads(page, before);
    check(await page.locator('#profile-select').inputValue() === devices.per_device[other].profile, 'a click on a device opens its profile');
    check(await page.locator('#device-select').inputValue() === JSON.stringify([devices.per_device[other].profile, devices.per_device[other].space_index]), 'the device selector follows');

    // 7b. An RMM log: what it does not record is unknown, not 0 B and not HBM.
    before = await loads(page);
    await page.selectOption('#run-select', RUN_RMM);
    await waitLoads(page, before);
    check((await page.locator('#stat-frag .value').textContent()).trim() === 'unknown', 'an RMM log\'s peak reserved is "unknown"');
    check(await page.locator('#reserved-toggle').isHidden(), 'and there is no reserved line to show');
    check(await page.evaluate(() => !window.hbmViewer.views.timeline.hasReserved), 'the timeline draws no reserved series');
    check((await page.locator('#space-select option').first().textContent()).startsWith('unknown'), 'its memory type is "unknown", not HBM');
    check(await page.locator('#padding-charts').isHidden() && await page.locator('#padding-none').isVisible(), '"By padding size" is left out when nothing is padded, with a line saying why');
    await shot(page, 'rmm_log');

    check(foreign.length === 0, `the page loads nothing from the network (${foreign.join(', ') || 'none'})`);
    check(errors.length === 0, `no errors in the page (${errors.join('; ') || 'none'})`);

    // 8. An empty logdir, then a run appears.
    const empty = await context.newPage();
    await empty.goto(args['empty-url']);
    await empty.waitForSelector('#empty-state:not([hidden])', { timeout: 10000 });
    check((await empty.locator('#empty-state').textContent()).includes('No profiles in this logdir yet'), 'an empty logdir says so');
    // its one run is a link to a run outside it (viewer_browser.sh): skipped, and the page says so
    await empty.waitForSelector('#skipped:not([hidden])', { timeout: 10000 });
    const skippedText = await empty.locator('#skipped').textContent();
    check(skippedText.includes('1 entry of the logdir skipped') && skippedText.includes('plugins/profile/linked_run')
      && skippedText.includes('outside the logdir'), `the page says which entry was skipped and why (${skippedText.slice(0, 200)})`);
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
}

run('viewer', main);
