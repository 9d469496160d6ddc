// viewer_browser_bench.mjs — the Memory Viewer's page timings in headless Chromium on a big
// profile (bench/viewer_browser_bench.sh serves bench_viewer's 1M-event logdir): the first
// view, and each interaction (timeline zoom and hover, allocation timeline zoom, pan and
// search, bar hover to card, memory type switch), medians of several runs. In-page times are
// performance.now() around the page's own code, up to the next animation frame (drawn).
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../web/package.json'));
const { chromium } = require('playwright-core');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const runs = Number(args.runs || 5);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = {};
function record(name, ms) {
  (results[name] ||= []).push(ms);
}

const context = await chromium.launchPersistentContext(args.profiledir, {
  executablePath: args.chromium || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

const waitLoads = (page, n) => page.waitForFunction((k) => window.hbmViewer?.loads > k, n, { timeout: 60000 });
const frame = 'await new Promise((r) => requestAnimationFrame(() => r()));';

for (let i = 0; i < runs; i++) {
  const page = await context.newPage();
  const t0 = Date.now();
  await page.goto(args.url);
  await waitLoads(page, 0);
  record('first view (navigation to drawn, wall)', Date.now() - t0);
  record('first view (page script start to drawn)', await page.evaluate(() => window.hbmViewer.timings.firstViewMs));

  // timeline: zoom to the middle tenth, then back
  record('timeline zoom (fetch + draw)', await page.evaluate(new Function(`return (async () => {
    const tl = window.hbmViewer.views.timeline; const n = tl.nSteps; const t = performance.now();
    await tl.zoomTo(n * 0.45, n * 0.55); ${frame} return performance.now() - t; })()`)));
  record('timeline reset (fetch + draw)', await page.evaluate(new Function(`return (async () => {
    const tl = window.hbmViewer.views.timeline; const t = performance.now();
    await tl.zoomTo(0, tl.nSteps); ${frame} return performance.now() - t; })()`)));

  // timeline hover: the op at the point
  const tl = page.locator('#timeline-chart .u-over');
  await tl.scrollIntoViewIfNeeded();
  const tb = await tl.boundingBox();
  let h0 = Date.now();
  await page.mouse.move(tb.x + tb.width * (0.3 + i * 0.05), tb.y + tb.height / 2);
  await page.waitForFunction((s) => document.querySelector('#timeline-hover').dataset.step && document.querySelector('#timeline-hover').dataset.step !== s, String(-1));
  record('timeline hover (wall)', Date.now() - h0);

  // bar hover -> card (the card's details come from /api/buffer)
  const over = page.locator('#bars-size .u-over');
  await over.scrollIntoViewIfNeeded();
  const bb = await over.boundingBox();
  const n = await page.evaluate(() => window.hbmViewer.state.bars.size.length);
  const target = await page.evaluate((k) => window.hbmViewer.state.bars.size[k].id, i % n);
  h0 = Date.now();
  await page.mouse.move(bb.x + (bb.width * ((i % n) + 0.5)) / n, bb.y + bb.height - 4);
  await page.waitForFunction((id) => document.querySelector('#buffer-card').dataset.id === String(id) && document.querySelector('#buffer-card [data-field="range"]'), target);
  record('bar hover to full card (wall)', Date.now() - h0);

  // allocation timeline: zoom in (fetch + draw), pan (draw only), search
  await page.locator('#alloc-canvas').scrollIntoViewIfNeeded();
  record('alloc zoom to 1% (fetch + draw)', await page.evaluate(new Function(`return (async () => {
    const a = window.hbmViewer.views.alloc; const n = a.summary.n_steps;
    a.view.x0 = n * 0.5; a.view.x1 = n * 0.51; const t = performance.now();
    await a.fetch(false); ${frame} return performance.now() - t; })()`)));
  record('alloc pan (redraw)', await page.evaluate(new Function(`return (async () => {
    const a = window.hbmViewer.views.alloc; const span = a.view.x1 - a.view.x0; a.view.x0 += span / 10; a.view.x1 += span / 10;
    const t = performance.now(); a.draw(); ${frame} return performance.now() - t; })()`)));
  record('alloc reset to all (fetch + draw)', await page.evaluate(new Function(`return (async () => {
    const a = window.hbmViewer.views.alloc; a.view = { x0: 0, x1: a.summary.n_steps, y0: 0, y1: a.extent };
    const t = performance.now(); await a.fetch(false); ${frame} return performance.now() - t; })()`)));
  record('alloc search op (fetch + draw)', await page.evaluate(new Function(`return (async () => {
    const a = window.hbmViewer.views.alloc; const t = performance.now();
    await a.search('layer_0${i % 10}/dot'); ${frame} const ms = performance.now() - t; await a.search(''); return ms; })()`)));

  // memory type switch and back (every request of a view again, analysis cached)
  const spaces = await page.locator('#space-select option').count();
  if (spaces > 1) {
    let before = await page.evaluate(() => window.hbmViewer.loads);
    h0 = Date.now();
    await page.selectOption('#space-select', '1');
    await waitLoads(page, before);
    record('switch memory type (wall)', Date.now() - h0);
    record('switch memory type (in page: requests + drawing)', await page.evaluate(() => window.hbmViewer.timings.lastLoadMs));
    before = await page.evaluate(() => window.hbmViewer.loads);
    h0 = Date.now();
    await page.selectOption('#space-select', '0');
    await waitLoads(page, before);
    record('switch back to HBM (wall)', Date.now() - h0);
    const t = await page.evaluate(() => window.hbmViewer.timings);
    record('switch back (in page: requests + drawing)', t.lastLoadMs);
    record('  of which requests', t.lastFetchMs);
    record('  of which drawing', t.lastRenderMs);
  }
  await page.close();
}
await context.close();

console.log(`page timings on ${args.url} (median of ${runs} runs, ms):`);
for (const [name, xs] of Object.entries(results)) {
  console.log(`  ${name.padEnd(42)} ${median(xs).toFixed(1).padStart(8)}   [${xs.map((x) => x.toFixed(0)).join(', ')}]`);
}
