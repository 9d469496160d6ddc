// step_plan.test.mjs — the Memory Viewer's "Step plan" panel (web/src/step_plan.js) in a real
// browser (Debian's Chromium driven by playwright-core), against `hbm view` serving the logdir
// `test_viewer_step_plan --write-fixtures` writes: a profile with mode learn's plan (its
// markers: 2 planned steps, 68 and 72 of 72 operations served, 2 MiB saved) and one without.
// Run by tests/viewer_browser.sh.
//
// Checks: the panel shows the step found, a bar a planned step with its share, the memory
// saved, the same numbers /api/step_plan gives; a profile without a plan hides it.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { args, check, choose, launch, run, waitLoads } from './harness.mjs';

async function main() {
  mkdirSync(args.artifacts, { recursive: true });
  const api = await (await fetch(`${args.url}/api/step_plan?run=run1&profile=learn.hbmtrace`)).json();
  const context = await launch();
  try {
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(args.url);
    await waitLoads(page, 0);
    await choose(page, '#run-select', 'run1');
    await choose(page, '#profile-select', 'learn.hbmtrace');
    const panel = page.locator('#step-plan-panel');
    await panel.waitFor({ state: 'visible', timeout: 10000 });
    const text = await panel.textContent();
    check(text.includes('72 operations (36 allocations)'), 'the step found is shown');
    check(await page.locator('#step-plan-panel .plan-step').count() === api.step_plan.steps.length, `a bar a planned step (${api.step_plan.steps.length})`);
    check(text.includes('94.44%') && text.includes('100.00%'), 'each step\'s share served from the plan');
    check(text.includes('Memory saved') && text.includes('2.00 MiB'), 'the memory saved (2 MiB)');
    await panel.scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(args.artifacts, 'step_plan.png'), fullPage: true });
    await choose(page, '#profile-select', 'bfc.hbmtrace');
    await page.waitForFunction(() => document.querySelector('#step-plan-panel').hidden, null, { timeout: 10000 });
    check(true, 'a profile without a plan hides the panel');
    check(errors.length === 0, `no page errors${errors.length ? `: ${errors.join('; ')}` : ''}`);
  } finally {
    await context.close();
  }
}

run('step plan', main);
