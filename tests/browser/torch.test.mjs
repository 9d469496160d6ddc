// torch.test.mjs — PyTorch memory snapshots in the Memory Viewer, in a real browser (Debian's
// Chromium driven by playwright-core), against `hbm view` serving a logdir that holds the
// fixtures of tests/data/torch/ (make_snapshots.py). Run by tests/viewer_browser.sh.
//
// Checks: the snapshot opens; the peak shown equals the simulation's (NAME.expected) and
// `hbm report --json`'s; the OOM PyTorch recorded is listed; a bar's card shows the user's
// frame as the op and the stack; a two-GPU snapshot has a memory type per device, each with
// its own peak. Screenshots go to --artifacts.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { args, check, choose, launch, run, waitLoads } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const DATA = path.join(here, '../data/torch');
const RUN = 'run1';

// "cuda:N key value" lines from make_snapshots.py's simulation.
function expected(name, device, key) {
  for (const line of readFileSync(path.join(DATA, `${name}.expected`), 'utf8').split('\n')) {
    const [d, k, v] = line.split(' ');
    if (d === device && k === key) return Number(v);
  }
  throw new Error(`no ${device} ${key} in ${name}.expected`);
}

function reportPeak(file) {
  const json = JSON.parse(execFileSync(args.hbm, ['report', '--json', file], { encoding: 'utf8', timeout: 20000 }));
  const first = Array.isArray(json) ? json[0] : json.spaces ? json.spaces[0] : json;
  return first.peak_bytes;
}

async function apiJson(endpoint, query) {
  const res = await fetch(`${args.url}/api/${endpoint}?${new URLSearchParams(query)}`);
  return res.json();
}

const peakShown = async (page) => Number(await page.locator('#stat-peak .value').getAttribute('data-bytes'));

async function main() {
  mkdirSync(args.artifacts, { recursive: true });
  const context = await launch();
  try {
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(args.url);
    await waitLoads(page, 0);
    await choose(page, '#run-select', RUN);

    // 1. The snapshot opens with the simulation's peak and PyTorch's OOM.
    await choose(page, '#profile-select', 'small.pickle');
    const peak = await peakShown(page);
    const want = expected('small', 'cuda:0', 'peak_bytes');
    check(peak === want, `small.pickle: the peak shown (${peak}) is the simulation's (${want})`);
    check(peak === reportPeak(path.join(args.logdir, 'plugins/profile', RUN, 'small.pickle')), 'and hbm report --json\'s');
    check((await page.locator('#oom-list').textContent()).includes('CUDA out of memory'), 'the OOM PyTorch recorded is listed');
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: path.join(args.artifacts, 'torch_overview.png'), fullPage: true });

    // 2. The largest buffer at the peak: its card shows the op and the stack.
    const bySize = await apiJson('buffers_at_peak', { run: RUN, profile: 'small.pickle', order: 'size' });
    const over = page.locator('#bars-size .u-over');
    await over.scrollIntoViewIfNeeded();
    const box = await over.boundingBox();
    await page.mouse.move(box.x + box.width / (2 * bySize.buffers.length), box.y + box.height - 5);
    await page.waitForFunction((id) => document.querySelector('#buffer-card')?.dataset.id === String(id) && document.querySelector('#buffer-card [data-field="label"]'), bySize.buffers[0].id, { timeout: 5000 });
    const op = await page.locator('#buffer-card [data-field="op"]').textContent();
    check(op === bySize.buffers[0].op, `the card shows the op (${op})`);
    const stackHeader = await page.locator('#buffer-card tr:has([data-field="label"]) th').textContent();
    check(stackHeader === 'Stack', 'a runtime label is shown as the stack');

    // 3. Two GPUs: a memory type per device, each with its own peak.
    await choose(page, '#profile-select', 'two_devices.pickle');
    check(await page.locator('#space-select option').count() === 2, 'two_devices.pickle has two memory types');
    await choose(page, '#space-select', '1');
    const peak1 = await peakShown(page);
    const want1 = expected('two_devices', 'cuda:1', 'peak_bytes');
    check(peak1 === want1, `cuda:1's peak shown (${peak1}) is the simulation's (${want1})`);
    check(errors.length === 0, `no page errors${errors.length ? `: ${errors.join('; ')}` : ''}`);
  } finally {
    await context.close();
  }
}

run('torch', main);
