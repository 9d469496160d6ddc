// main.js — the Memory Viewer page: selectors (run, profile/module, memory type, compare),
// header numbers, the memory timeline, the three "buffers at peak" charts with the buffer card,
// the allocation timeline, OOM events and the comparison of two profiles. Every number comes
// from the server's API (the same analysis `hbm report` prints); the page only draws.
// The selection lives in the URL's hash (#run=…&profile=…&space=…) so a view can be shared.
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { api } from './api.js';
import { Timeline } from './timeline.js';
import { BarChart, mergeSmall } from './bars.js';
import { AllocView } from './alloc_view.js';
import { renderCard } from './card.js';
import { renderCompare } from './compare.js';
import { fillDeviceSelect, renderDevices, selectShownDevice } from './devices.js';
import { summaryHtml } from './summary.js';
import { renderStepPlan } from './step_plan.js';
import {
  formatBytes, formatCount, escapeHtml, categoryColor, groupColors,
  CATEGORY_LABELS,
} from './format.js';
import { PeakTable } from './peak_table.js';

const $ = (id) => document.getElementById(id);
const RUN_POLL_MS = 4000;
// Bars drawn one by one per chart (a chart is about 1000 pixels wide; drag zooms into them);
// past that the rest is summed in a note under the chart, not drawn as a bar that would
// flatten all the others.
const BAR_LIMIT = 2000;

function barsOf(answer) {
  const bars = answer.buffers;
  bars.rest = answer.rest;
  return bars;
}

function restNote(order, rest) {
  if (!rest) return '';
  const which = { program: 'later in program order', size: 'smaller', padding: 'with less padding' }[order];
  return `${formatCount(rest.count)} more buffers ${which} (${formatBytes(rest.size)}) are not drawn one by one.`;
}

const state = {
  runs: [], run: null, profiles: [], profile: null, info: null, space: 0, summary: null,
  bars: { program: [], size: [], padding: [] }, cards: new Map(), pinned: null, hovered: null,
  loadSeq: 0,
};
const timings = {};
const t0 = performance.now();
// For tests and the browser benchmark: the state, timings and the views.
window.hbmViewer = { state, timings, ready: false, loads: 0 };

// Marks the end of a load (a view, an empty or an error state) for tests and benchmarks.
function settled() {
  window.hbmViewer.ready = true;
  window.hbmViewer.loads++;
}

function args(extra = {}) {
  return { run: state.run, profile: state.profile, space: state.space, ...extra };
}

// Answers about the current profile, kept while it stays selected (selecting a profile asks
// the server again, which reloads a file that changed): going back to a memory type or a zoom
// seen before costs no request. At most MEMO_MAX, the oldest dropped first.
const MEMO_MAX = 64;
const memo = new Map();
function cachedApi(endpoint, a) {
  const key = `${endpoint}?${JSON.stringify(a)}`;
  if (memo.has(key)) return memo.get(key);
  const answer = api(endpoint, a);
  memo.set(key, answer);
  answer.catch(() => memo.delete(key));
  if (memo.size > MEMO_MAX) memo.delete(memo.keys().next().value);
  return answer;
}

// ---- hash ----

function readHash() {
  return new URLSearchParams(location.hash.slice(1));
}

function writeHash() {
  const h = new URLSearchParams({ run: state.run || '', profile: state.profile || '', space: String(state.space) });
  history.replaceState(null, '', `#${h}`);
}

// ---- states and messages ----

function setStatus(text, isError) {
  const el = $('status');
  el.textContent = text || '';
  el.classList.toggle('error', !!isError);
}

function showEmpty(logdir) {
  $('content').hidden = true;
  $('error-state').hidden = true;
  const el = $('empty-state');
  el.hidden = false;
  el.innerHTML = `<h2>No profiles in this logdir yet</h2>
    <p>The viewer serves <code>${escapeHtml(logdir)}</code>, which has no runs under
    <code>plugins/profile/</code>. Make one, for example:</p>
    <pre>hbm demo --logdir ${escapeHtml(logdir)}</pre>
    <p>or run a program with <code>HBM_PROFILE_DIR=${escapeHtml(logdir)}</code>, or put an
    RMM log, an HLO module or an XLA dump in <code>plugins/profile/&lt;run&gt;/</code>.
    This page looks again every few seconds: new runs appear by themselves.</p>`;
}

// What the logdir's listing left out (links leading out of it, links to nothing), and why:
// `hbm report DIR` says the same on stderr.
function showSkipped(data) {
  const el = $('skipped');
  const list = data.skipped || [];
  if (el.hidden && list.length) el.open = !data.runs.length; // open when nothing else shows
  el.hidden = !list.length;
  if (!list.length) return;
  const n = data.skipped_count || list.length;
  el.querySelector('summary').textContent =
    `${n} entr${n === 1 ? 'y' : 'ies'} of the logdir skipped (symbolic links leading out of it are not served${data.follow_links ? '' : ' without hbm view --follow-links'})`;
  el.querySelector('ul').innerHTML = list
    .map((s) => `<li><code>${escapeHtml(s.path)}</code>: ${escapeHtml(s.why)}</li>`)
    .join('') + (n > list.length ? `<li>… and ${n - list.length} more</li>` : '');
}

function showError(message) {
  $('content').hidden = true;
  $('empty-state').hidden = true;
  const el = $('error-state');
  el.hidden = false;
  el.innerHTML = `<h2>This profile cannot be shown</h2><pre>${escapeHtml(message)}</pre>
    <p>Pick another profile or run above; the file is left as it is.</p>`;
}

function showContent() {
  $('empty-state').hidden = true;
  $('error-state').hidden = true;
  $('content').hidden = false;
}

function setBanner(text) {
  const el = $('banner');
  el.hidden = !text;
  el.textContent = text ? `⚠ ${text}` : '';
}

// ---- selectors ----

function fillSelect(select, options, value) {
  select.innerHTML = options
    .map((o) => `<option value="${escapeHtml(o.value)}">${escapeHtml(o.label)}</option>`)
    .join('');
  if (value != null) select.value = value;
}

// Memory types; an XProf profile's spaces are programs × memory types (largest peak first):
// then they are grouped by program, which makes this XProf's program selector too.
function fillSpaces(select, spaces) {
  const devices = [...new Set(spaces.map((s) => s.device))];
  if (devices.length < 3) {
    fillSelect(select, spaces.map((s) => ({
      value: String(s.index), label: `${s.name}${s.device ? ` (${s.device})` : ''}`,
    })), null);
    return;
  }
  select.innerHTML = devices.map((d) => `<optgroup label="${escapeHtml(d)}">${spaces
    .filter((s) => s.device === d)
    .map((s) => `<option value="${s.index}">${escapeHtml(`${s.name} — ${d}`)}</option>`)
    .join('')}</optgroup>`).join('');
}

// The steps of one space when a profile's spaces take turns on the step axis (XProf's
// programs, meta "space_steps": "from-to" per space, comma-separated): the first view of a
// space is zoomed to its own steps.
function spaceSteps(info, space) {
  const ranges = info?.meta?.space_steps?.split(',');
  const m = ranges?.[space]?.match(/^(\d+)-(\d+)$/);
  return m ? [Number(m[1]), Number(m[2])] : null;
}

async function refreshRuns() {
  let data;
  try {
    data = await api('runs');
  } catch (err) {
    setStatus(err.message, true);
    return;
  }
  setStatus('');
  showSkipped(data);
  state.logdir = data.logdir;
  const names = data.runs.map((r) => r.run);
  const known = state.runs.map((r) => r.run);
  state.runs = data.runs;
  if (!names.length) {
    state.run = null;
    fillSelect($('run-select'), [], null);
    fillSelect($('profile-select'), [], null);
    fillSelect($('space-select'), [], null);
    showEmpty(data.logdir);
    if (!window.hbmViewer.ready) settled();
    return;
  }
  if (names.join('\n') === known.join('\n') && state.run) return;
  fillSelect($('run-select'), data.runs.map((r) => ({
    value: r.run, label: `${r.run} (${r.profiles} profile${r.profiles > 1 ? 's' : ''})`,
  })), state.run);
  refreshCompareOptions();
  if (!state.run || !names.includes(state.run)) {
    const wanted = readHash().get('run');
    await selectRun(names.includes(wanted) ? wanted : names[0]);
  } else if (names.length > known.length) {
    setStatus(`new run: ${names.find((n) => !known.includes(n))}`);
  }
}

async function selectRun(run) {
  state.run = run;
  $('run-select').value = run;
  let data;
  try {
    data = await api('profiles', { run });
  } catch (err) {
    showError(err.message);
    settled();
    return;
  }
  state.profiles = data.profiles;
  fillSelect($('profile-select'), data.profiles.map((p) => ({
    value: p.file,
    label: `${p.file}${p.name && p.name !== p.file ? ` — ${p.name}` : ''} (${formatBytes(p.bytes)})`,
  })), null);
  const wanted = readHash().get('profile');
  const file = data.profiles.some((p) => p.file === wanted) && readHash().get('run') === run ? wanted : data.default;
  showDevices(run);
  await selectProfile(file);
}

// Several hosts, devices or ranks in the run: the device selector and the summary panel.
async function showDevices(run) {
  let devices = null;
  try {
    devices = await api('devices', { run });
  } catch (err) {
    devices = null; // a run whose profiles do not load has no summary; the profile says why
  }
  if (state.run !== run) return;
  state.devices = devices;
  fillDeviceSelect($('device-wrap'), $('device-select'), devices);
  renderDevices($('devices-panel'), devices, pickDevice);
  selectShownDevice($('device-select'), state.profile, state.space);
}

async function pickDevice(value) {
  const [file, space] = JSON.parse(value);
  $('device-select').value = value;
  if (file !== state.profile) await selectProfile(file);
  if (state.space !== space) await selectSpace(space);
}

async function selectProfile(file) {
  state.profile = file;
  memo.clear();
  $('profile-select').value = file;
  setBanner('');
  let info;
  try {
    info = await api('profile', { run: state.run, profile: file });
  } catch (err) {
    state.info = null;
    fillSelect($('space-select'), [], null);
    showError(err.message);
    settled();
    return;
  }
  const previous = state.info?.spaces?.[state.space]?.name;
  state.info = info;
  if (info.warning) setBanner(`Truncated profile: ${info.warning}. What was read before the damage is shown.`);
  else if (info.notes) setBanner(`Note: ${info.notes}`);
  fillSpaces($('space-select'), info.spaces);
  const hash = readHash();
  let space = 0;
  const hashed = Number(hash.get('space'));
  if (hash.get('profile') === file && hash.get('run') === state.run && info.spaces[hashed]) space = hashed;
  else if (previous) space = Math.max(0, info.spaces.findIndex((s) => s.name === previous));
  await selectSpace(space);
}

// ---- loading a space ----

async function selectSpace(space) {
  const seq = ++state.loadSeq;
  const started = performance.now();
  state.space = space;
  $('space-select').value = String(space);
  selectShownDevice($('device-select'), state.profile, space);
  writeHash();
  state.cards.clear();
  state.pinned = null;
  setStatus('loading…');
  let summary, program, bySize, byPadding, oom;
  // Everything is asked at once (the server answers in parallel); the two timelines' data
  // is handed to them when the summary is in.
  showContent();
  const timelineData = views.timeline.fetchAll();
  const allocData = views.alloc.fetchAll();
  try {
    [summary, program, bySize, byPadding, oom] = await Promise.all([
      cachedApi('summary', args()),
      cachedApi('buffers_at_peak', args({ order: 'program', limit: BAR_LIMIT })),
      cachedApi('buffers_at_peak', args({ order: 'size', limit: BAR_LIMIT })),
      cachedApi('buffers_at_peak', args({ order: 'padding', limit: BAR_LIMIT })),
      cachedApi('oom', args()),
      timelineData,
      allocData,
    ]);
  } catch (err) {
    if (seq === state.loadSeq) {
      showError(err.message);
      setStatus('');
      settled();
    }
    return;
  }
  if (seq !== state.loadSeq) return;
  const fetched = performance.now();
  timings.lastFetchMs = fetched - started;
  state.summary = summary;
  state.peakBars = { program: barsOf(program), size: barsOf(bySize), padding: barsOf(byPadding) };
  state.bars = state.peakBars;
  state.at = null;
  $('peak-back').hidden = true;
  views.timeline.setPicked(null);
  state.oom = oom;
  showContent();
  renderSummary(summary);
  renderBars();
  renderCard($('buffer-card'), null);
  renderOoms(oom);
  const runtime = state.info.kind === 'runtime';
  const reserved = runtime && summary.reserved_known; // an RMM log records none: no line
  $('reserved-toggle').hidden = !reserved;
  await Promise.all([
    views.timeline.show(summary, state.info.kind, timelineData).then(() => {
      $('show-reserved').checked = reserved && views.timeline.showReserved;
    }),
    views.alloc.show(summary, state.info.kind, oom.events, allocData),
  ]);
  if (seq !== state.loadSeq) return;
  const steps = spaceSteps(state.info, space);
  if (steps && (steps[0] > 0 || steps[1] < summary.n_steps)) await views.timeline.zoomTo(steps[0], steps[1]);
  setStatus('');
  // Markers are many on a long run and only decorate the timeline: asked for after the view.
  views.timeline.setMarkers([]);
  cachedApi('oom', args({ markers: 1 })).then((d) => {
    if (seq === state.loadSeq) views.timeline.setMarkers(d.markers);
  }).catch(() => {});
  // Mode learn's plan, when the profile holds one (step_plan.js): asked for after the view.
  cachedApi('step_plan', { run: state.run, profile: state.profile }).then((d) => {
    if (seq === state.loadSeq) renderStepPlan($('step-plan-panel'), $('step-plan-body'), d.step_plan);
  }).catch(() => {});
  timings.lastLoadMs = performance.now() - started;
  timings.lastRenderMs = performance.now() - fetched;
  if (timings.firstViewMs == null) timings.firstViewMs = performance.now() - t0;
  settled();
  if ($('compare-select').value) runCompare();
}

// ---- header numbers ----

function renderSummary(s) {
  $('summary').innerHTML = summaryHtml(s, state.info);
  $('summary').dataset.peakBytes = String(s.peak_bytes);
  $('timeline-title').textContent = state.info.kind === 'runtime'
    ? 'Memory in use over allocator events' : 'Memory allocation over program order';
  setPeakTitle();
}

function setPeakTitle() {
  const s = state.summary;
  const unit = state.info.kind === 'runtime' ? 'event' : 'step';
  const title = $('peak-title');
  if (state.at) {
    const label = state.at.label ? ` ${state.at.label}` : '';
    title.textContent = `Buffers live at ${unit} ${formatCount(state.at.step)}${label} (${formatBytes(state.at.bytes)}; the peak is ${formatBytes(s.peak_bytes)} at ${formatCount(s.peak_step)})`;
  } else {
    title.textContent = s.peak_step >= 0
      ? `Buffers at peak (${unit} ${formatCount(s.peak_step)}, ${formatBytes(s.peak_bytes)})`
      : 'Buffers at peak';
  }
}

// The buffers live at any step (a click on the timeline, an OOM event) in place of the peak's.
async function showBuffersAt(step) {
  const seq = state.loadSeq;
  try {
    const [program, bySize, byPadding] = await Promise.all(['program', 'size', 'padding']
      .map((order) => cachedApi('buffers_at', args({ step, order, limit: BAR_LIMIT }))));
    if (seq !== state.loadSeq) return;
    state.at = { step, label: program.label, bytes: program.bytes };
    state.bars = { program: barsOf(program), size: barsOf(bySize), padding: barsOf(byPadding) };
    state.pinned = null;
    $('peak-back').hidden = false;
    views.timeline.setPicked(step);
    setPeakTitle();
    renderBars();
    renderCard($('buffer-card'), null);
  } catch (err) {
    setStatus(err.message, true);
  }
}

function backToPeak() {
  state.at = null;
  state.bars = state.peakBars;
  state.pinned = null;
  $('peak-back').hidden = true;
  views.timeline.setPicked(null);
  setPeakTitle();
  renderBars();
  renderCard($('buffer-card'), null);
}

// ---- buffers at peak ----

function colorFunction() {
  if ($('color-by').value === 'group') {
    const colors = groupColors(state.summary.groups);
    return (b) => (b.merged ? '#b0b6bd' : colors.get(b.group || b.category) || '#b0b6bd');
  }
  return (b) => (b.merged ? '#b0b6bd' : categoryColor(b.category));
}

function renderLegend() {
  const s = state.summary;
  let items;
  if ($('color-by').value === 'group') {
    const colors = groupColors(s.groups);
    items = s.groups.map((g) => [colors.get(g.name), g.name, g.bytes, g.count]);
  } else {
    items = Object.entries(s.category_bytes).map(([name, bytes]) => [categoryColor(name), CATEGORY_LABELS[name] || name, bytes]);
  }
  $('legend').innerHTML = items.map(([color, name, bytes, count]) =>
    `<span class="item"><span class="swatch" style="background:${color}"></span>${escapeHtml(name)} <b>${formatBytes(bytes)}</b>${count ? ` (${count})` : ''}</span>`).join('')
    + (anyPadding(state.bars) ? '<span class="item muted"><span class="swatch pad-swatch"></span>light cap = padding</span>' : '');
}

// Whether any buffer shown has padding: when none has, "By padding size" would repeat
// "By size" bar for bar, so it is left out with a line that says why.
function anyPadding(bars) {
  return bars.size.some((b) => b.size > b.unpadded) || (bars.size.rest && bars.size.rest.size > bars.size.rest.unpadded);
}

function renderBars() {
  renderLegend();
  const color = colorFunction();
  const log = $('log-scale').checked;
  const merge = $('merge-small').checked;
  const padded = anyPadding(state.bars);
  $('padding-charts').hidden = !padded;
  $('padding-none').hidden = padded;
  for (const order of padded ? ['program', 'size', 'padding'] : ['program', 'size']) {
    const items = merge ? mergeSmall(state.bars[order], order) : state.bars[order];
    views.bars[order].show(items, color, log);
    $(`rest-${order}`).textContent = restNote(order, state.bars[order].rest);
  }
  peakTable.reset();
}

// The table of the buffers at the peak: searched and paged by the server (peak_table.js).
let peakTable = null;

async function cardFor(item) {
  if (item.merged) return item;
  if (state.cards.has(item.id)) return state.cards.get(item.id);
  const card = await api('buffer', { run: state.run, profile: state.profile, id: item.id });
  state.cards.set(item.id, card);
  return card;
}

async function showBuffer(item, pin) {
  const el = $('buffer-card');
  if (!pin && state.pinned) return;
  state.hovered = item;
  if (!item) {
    if (!state.pinned) renderCard(el, null);
    return;
  }
  renderCard(el, item, state.info.kind, pin);
  try {
    const card = await cardFor(item);
    if (state.hovered === item || state.pinned === item) renderCard(el, card, state.info.kind, !!state.pinned);
  } catch (err) {
    el.insertAdjacentHTML('beforeend', `<p class="error">${escapeHtml(err.message)}</p>`);
  }
}

function pinBuffer(item) {
  state.pinned = state.pinned === item ? null : item;
  showBuffer(item, true);
}

// ---- allocation timeline card and OOM list ----

async function showAllocCard(id) {
  const el = $('alloc-card');
  try {
    const card = await api('buffer', { run: state.run, profile: state.profile, id });
    el.hidden = false;
    renderCard(el, card, state.info.kind, false);
  } catch (err) {
    el.hidden = false;
    el.textContent = err.message;
  }
}

// An OOM is what a user opens a profile about: the panel sits under the header numbers, each
// event with its error and diagnosis up to the cause; the list of live buffers folds away.
function oomMessageHtml(message) {
  const lines = (message || '').split('\n');
  const cut = lines.findIndex((l) => /^(Peak buffers|\s*Buffer 1:)/.test(l));
  if (cut <= 0) return `<pre>${escapeHtml(message || '')}</pre>`;
  return `<pre>${escapeHtml(lines.slice(0, cut).join('\n'))}</pre>
    <details><summary>${escapeHtml(lines[cut].trim())}</summary><pre>${escapeHtml(lines.slice(cut + 1).join('\n'))}</pre></details>`;
}

function renderOoms(oom) {
  const panel = $('oom-panel');
  panel.hidden = !oom.events.length;
  const unit = state.info.kind === 'runtime' ? 'event' : 'step';
  $('oom-list').innerHTML = oom.events.map((e, i) => `
    <div class="oom-event" id="oom-${i}" data-step="${e.step}">
      <div><b class="oom">OOM at ${unit} ${formatCount(e.step)}</b>: requested ${formatBytes(e.requested)},
      ${formatBytes(e.bytes_in_use)} in use${oom.limit_bytes ? ` of ${formatBytes(oom.limit_bytes)}` : ''}</div>
      ${oomMessageHtml(e.message)}
      <button type="button" class="oom-live" data-step="${e.step}">Buffers live here</button></div>`).join('');
  document.querySelectorAll('.oom-live').forEach((b) => b.addEventListener('click', () => {
    showBuffersAt(Number(b.dataset.step));
    $('peak-panel').scrollIntoView({ behavior: 'smooth' });
  }));
}

function focusOom(ev) {
  const i = state.oom.events.indexOf(ev);
  const el = $(`oom-${i}`);
  if (!el) return;
  document.querySelectorAll('.oom-event.focus').forEach((x) => x.classList.remove('focus'));
  el.classList.add('focus');
  el.scrollIntoView({ behavior: 'smooth', block: 'center' });
}

// ---- compare ----

async function refreshCompareOptions() {
  const select = $('compare-select');
  const current = select.value;
  const options = [{ value: '', label: 'none' }];
  const lists = await Promise.all(state.runs.slice(0, 30).map((r) =>
    api('profiles', { run: r.run }).then((d) => [r.run, d.profiles]).catch(() => [r.run, []])));
  for (const [run, profiles] of lists) {
    for (const p of profiles) options.push({ value: JSON.stringify([run, p.file]), label: `${run} / ${p.file}` });
  }
  fillSelect(select, options, current);
}

async function runCompare() {
  const value = $('compare-select').value;
  const panel = $('compare-panel');
  if (!value || !state.summary) {
    panel.hidden = true;
    return;
  }
  const [bRun, bProfile] = JSON.parse(value);
  panel.hidden = false;
  $('compare-body').textContent = 'comparing…';
  try {
    const data = await api('compare', args({ b_run: bRun, b_profile: bProfile }));
    renderCompare($('compare-title'), $('compare-body'), data);
  } catch (err) {
    $('compare-body').innerHTML = `<p class="error">${escapeHtml(err.message)}</p>`;
  }
}

// ---- wiring ----

const views = {
  timeline: new Timeline($('timeline-chart'), $('timeline-hover'),
    (from, to, points) => cachedApi('timeline', args({ from, to, points })), (step) => showBuffersAt(step)),
  bars: {},
  alloc: new AllocView($('alloc-canvas'), $('alloc-wrap'), $('tooltip'), $('alloc-info'), {
    fetchRects: (a) => cachedApi('allocations', args(a)),
    onRectClick: (id) => showAllocCard(id),
    onOomClick: (ev) => focusOom(ev),
  }),
};
for (const order of ['program', 'size', 'padding']) {
  views.bars[order] = new BarChart($(`bars-${order}`), {
    onHover: (item) => showBuffer(item, false),
    onClick: (item) => pinBuffer(item),
  });
}
window.hbmViewer.views = views;
views.timeline.onZoom = (from, to) => {
  if ($('link-zoom').checked) views.alloc.showSteps(from, to);
};

function bind() {
  $('run-select').addEventListener('change', (e) => selectRun(e.target.value));
  $('profile-select').addEventListener('change', (e) => selectProfile(e.target.value));
  $('space-select').addEventListener('change', (e) => selectSpace(Number(e.target.value)));
  $('compare-select').addEventListener('change', runCompare);
  $('device-select').addEventListener('change', (e) => pickDevice(e.target.value));
  $('color-by').addEventListener('change', renderBars);
  $('merge-small').addEventListener('change', renderBars);
  $('log-scale').addEventListener('change', renderBars);
  $('timeline-reset').addEventListener('click', () => views.timeline.reset());
  $('peak-back').addEventListener('click', backToPeak);
  peakTable = new PeakTable(
    { wrap: $('peak-table-wrap'), filter: $('peak-filter'), table: $('peak-table'), count: $('peak-table-count') },
    args, (item) => pinBuffer(item));
  $('peak-table-wrap').addEventListener('toggle', () => peakTable.render());
  $('show-reserved').addEventListener('change', (e) => views.timeline.setReservedShown(e.target.checked));
  $('alloc-reset').addEventListener('click', () => views.alloc.reset());
  $('alloc-fit').addEventListener('click', () => views.alloc.fitMatches());
  let searchTimer;
  $('alloc-search').addEventListener('input', (e) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => views.alloc.search(e.target.value.trim()), 150);
  });
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && state.pinned) {
      state.pinned = null;
      renderCard($('buffer-card'), null);
    }
  });
}

bind();
refreshRuns();
setInterval(refreshRuns, RUN_POLL_MS);
