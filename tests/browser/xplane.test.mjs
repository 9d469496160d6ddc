// xplane.test.mjs — a real XProf profile in the Memory Viewer: `hbm view` on a logdir that
// jax.profiler.trace wrote (or, without JAX, a real .xplane.pb from ../shared). Run by
// tests/viewer_browser.sh. Checks: the page opens on the largest program's HBM; the memory
// type list groups every program (XProf's module list), largest peak first; the peak shown
// equals `hbm report --json`'s for that program; picking another program shows its peak; the
// first view is zoomed to the program's own steps; hbm's own plan of the program is shown
// beside XLA's; a buffer's source line in the table and on its card with its source stack;
// no page errors. Screenshots: --artifacts.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { args, check, launch, run, waitLoads } from './harness.mjs';

function xplaneFile(logdir) {
  const runs = path.join(logdir, 'plugins/profile');
  for (const run of readdirSync(runs)) {
    const f = readdirSync(path.join(runs, run)).find((n) => n.endsWith('.xplane.pb'));
    if (f) return path.join(runs, run, f);
  }
  return null;
}

async function main() {
  mkdirSync(args.artifacts, { recursive: true });
  const file = xplaneFile(args.logdir);
  const report = JSON.parse(execFileSync(args.hbm, ['report', '--json', file], { encoding: 'utf8', maxBuffer: 1 << 28 }));
  const spaces = report.spaces;
  console.log(`# ${path.basename(file)}: ${spaces.length} spaces, first ${spaces[0].space} of ${spaces[0].device}`);
  const context = await launch();
  try {
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(args.url);
    await waitLoads(page, 0, 30000);
    const groups = await page.locator('#space-select optgroup').evaluateAll((els) => els.map((e) => e.label));
    const programs = [...new Set(spaces.filter((s) => s.device !== 'allocator').map((s) => s.device))];
    check(groups.length >= programs.length && programs.every((p) => groups.includes(p)), `every program is listed (${programs.length})`);
    const peaks = spaces.filter((s) => s.device !== 'allocator').map((s) => s.peak_bytes);
    check(peaks.every((p, i) => i === 0 || p <= peaks[i - 1]), 'programs come largest peak first');
    check(await page.locator('#space-select').inputValue() === '0', 'the largest program is shown first');
    const shown = Number(await page.locator('#stat-peak .value').getAttribute('data-bytes'));
    check(shown === spaces[0].peak_bytes, `the peak shown (${shown}) equals hbm report's (${spaces[0].peak_bytes})`);
    // hbm's own plan of the program, beside XLA's buffer assignment (the report's meta).
    const planText = report.meta?.[`hbm_plan:${spaces[0].device}`];
    const planShown = await page.locator('#hbm-plan').count() ? await page.locator('#hbm-plan').innerText() : null;
    check(planText && planShown && planShown.trim() === planText.trim(), `hbm's plan is shown beside XLA's (${planShown})`);
    await page.screenshot({ path: path.join(args.artifacts, 'xplane_first.png') });

    // Source lines (today's JAX writes stack frames): the table's source column, the card's
    // source line and its source stack (XProf's "Source Stack"), as hbm report gives them.
    const ops = spaces[0].buffers_at_peak.map((b) => b.op);
    const withSource = spaces[0].buffers_at_peak.find((b) => b.source && b.stack
      && ops.filter((o) => o && o.includes(b.op)).length === 1);
    check(withSource, 'a buffer at the peak has a source line and stack');
    if (withSource) {
      await page.click('#peak-table-wrap summary');
      await page.fill('#peak-filter', withSource.op);
      await page.waitForFunction(() => document.querySelectorAll('#peak-table tbody tr').length === 1);
      const cell = page.locator('#peak-table tbody tr td.source');
      const shownCell = (await cell.textContent()).trim();
      check(shownCell === withSource.source.split('/').pop() && await cell.getAttribute('title') === withSource.source,
        `the table shows its source line (${shownCell}, the path as its title)`);
      await page.locator('#peak-table tbody tr').click();
      await page.waitForSelector('#buffer-card [data-field="stack"]', { timeout: 5000 });
      const source = (await page.locator('#buffer-card [data-field="source"]').innerText()).trim();
      check(source === withSource.source, `the card shows the source line (${source})`);
      const stack = (await page.locator('#buffer-card [data-field="stack"]').innerText()).trim();
      check(stack === withSource.stack.trim(), 'the card shows the source stack');
      await page.screenshot({ path: path.join(args.artifacts, 'xplane_source_stack.png') });
      await page.fill('#peak-filter', '');
      await page.keyboard.press('Escape');
    }

    // Another program: its own peak.
    const other = spaces.findIndex((s, i) => i > 0 && s.device !== spaces[0].device && s.device !== 'allocator');
    if (other > 0) {
      const before = await page.evaluate(() => window.hbmViewer.loads);
      await page.selectOption('#space-select', String(other));
      await waitLoads(page, before, 30000);
      const peak = Number(await page.locator('#stat-peak .value').getAttribute('data-bytes'));
      check(peak === spaces[other].peak_bytes, `program ${spaces[other].device}: peak ${peak} equals hbm report's`);
      const steps = (await page.evaluate(() => fetch(`/api/profile?${new URLSearchParams({ run: new URLSearchParams(location.hash.slice(1)).get('run'), profile: new URLSearchParams(location.hash.slice(1)).get('profile') })}`).then((r) => r.json()))).meta.space_steps;
      check(typeof steps === 'string' && steps.split(',').length === spaces.length, 'each program has its step range');
      await page.screenshot({ path: path.join(args.artifacts, 'xplane_other.png') });
    }
    check(errors.length === 0, `no errors in the page (${errors.join('; ') || 'none'})`);
  } finally {
    await context.close();
  }
}

run('xplane', main);
