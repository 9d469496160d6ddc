// compare.js — the "Compare with…" panel: two profiles' peaks side by side, the change of the
// peak attributed as `hbm diff` does (by reason, op, source, category, shape, group, buffer;
// the rows of each table add up to the change), what cannot be compared, and both timelines
// drawn over each other on the fraction of each run or program (from /api/compare).
import uPlot from 'uplot';
import { formatBytes, formatDelta, formatCount, escapeHtml, BYTE_INCRS } from './format.js';

const METRICS = [
  ['peak_bytes', 'Peak memory allocation'],
  ['peak_unpadded_bytes', 'Peak without padding'],
  ['padding_bytes', 'Padding overhead'],
  ['argument_bytes', 'Arguments'],
  ['output_bytes', 'Outputs'],
  ['temporary_bytes', 'Temporaries'],
  ['heap_bytes', 'With fragmentation / heap'],
  ['peak_reserved_bytes', 'Peak reserved'],
];

export const TABLES = [
  ['reason', 'by reason'], ['op', 'by op / instruction'], ['source', 'by source'],
  ['category', 'by category'], ['shape', 'by shape'], ['group', 'by group'], ['buffer', 'by buffer'],
];

const REASONS = {
  new: 'new buffer', gone: 'gone', grew: 'grew', shrank: 'shrank',
  lived_longer: 'lived longer across the peak', lived_shorter: 'no longer across the peak',
  only_at_b_peak: "only at the largest's peak", only_at_a_peak: "only at the median's peak",
};

const TIMELINE_HEIGHT = 220;

function deltaCell(delta) {
  if (delta == null) return '<td class="num muted">—</td>'; // unknown on one side (reserved of an RMM log)
  const cls = delta > 0 ? 'up' : delta < 0 ? 'down' : '';
  return `<td class="num ${cls}">${formatDelta(delta)}</td>`;
}

function metricsHtml(a, b, delta) {
  const rows = METRICS.map(([key, label]) => `<tr><th>${label}</th>
    <td class="num">${a[key] == null ? 'unknown' : formatBytes(a[key])}</td><td class="num">${b[key] == null ? 'unknown' : formatBytes(b[key])}</td>${deltaCell(delta[key])}</tr>`);
  rows.push(`<tr><th>Buffers live at the peak</th><td class="num">${formatCount(a.n_buffers_at_peak)}</td>
    <td class="num">${formatCount(b.n_buffers_at_peak)}</td><td class="num">${delta.n_buffers_at_peak > 0 ? '+' : ''}${delta.n_buffers_at_peak}</td></tr>`);
  return `<table class="compare" id="compare-metrics"><thead><tr><th></th><th>A (this)</th><th>B</th><th>B − A</th></tr></thead>
    <tbody>${rows.join('')}</tbody></table>`;
}

function countText(row) {
  return row.a_count > 1 || row.b_count > 1 ? ` <span class="muted">${row.a_count} → ${row.b_count}</span>` : '';
}

// One table of the diff: its rows, and the rows past the ones sent, summed.
export function tableHtml(diff, name) {
  const rows = diff[`by_${name}`] || [];
  const rest = diff[`by_${name}_rest`];
  const body = rows.map((r) => `<tr>${deltaCell(r.delta)}<td>${escapeHtml(REASONS[r.reason] || r.reason)}</td>
    <td class="num">${formatBytes(r.a_bytes)}</td><td class="num">${formatBytes(r.b_bytes)}</td>
    <td class="opname">${escapeHtml(name === 'reason' ? REASONS[r.key] || r.key : r.key)}${name === 'buffer' && r.a_shape !== r.b_shape ? ` <span class="muted">${escapeHtml(r.a_shape || '—')} → ${escapeHtml(r.b_shape || '—')}</span>` : ''}${countText(r)}</td></tr>`);
  if (rest) body.push(`<tr>${deltaCell(rest.delta)}<td colspan="4" class="muted">… and ${formatCount(rest.rows)} more rows</td></tr>`);
  return `<table class="compare" id="compare-table" data-table="${name}"><thead><tr><th>change</th><th>why</th><th>A</th><th>B</th><th>${escapeHtml(name)}</th></tr></thead>
    <tbody>${body.join('') || '<tr><td colspan="5" class="muted">nothing changed at the peaks</td></tr>'}</tbody></table>`;
}

function notesHtml(notes) {
  if (!notes || !notes.length) return '';
  return `<div class="compare-notes" id="compare-notes"><b>Not compared:</b><ul>${notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul></div>`;
}

// Both timelines on one axis: the fraction of each profile's steps (their lengths differ).
function drawTimelines(el, a, b) {
  el.innerHTML = '';
  const xs = new Set();
  const at = (t) => t.steps.map((s) => (t.n_steps > 1 ? s / (t.n_steps - 1) : 0));
  const ax = at(a), bx = at(b);
  ax.forEach((x) => xs.add(x));
  bx.forEach((x) => xs.add(x));
  const x = [...xs].sort((p, q) => p - q);
  // Each series steps from one point to the next: its value at x is its last point at or before x.
  const valuesAt = (px, bytes) => {
    let j = 0;
    return x.map((v) => {
      while (j + 1 < px.length && px[j + 1] <= v) j++;
      return px.length && px[0] <= v ? bytes[j] : null;
    });
  };
  const opts = {
    width: Math.max(300, el.clientWidth || 800),
    height: TIMELINE_HEIGHT,
    scales: { x: { time: false } },
    axes: [
      { values: (u, ticks) => ticks.map((t) => `${Math.round(t * 100)}%`) },
      { values: (u, ticks) => ticks.map((t) => formatBytes(t)), size: 80, incrs: BYTE_INCRS },
    ],
    series: [
      { label: 'fraction of the steps', value: (u, v) => (v == null ? '' : `${(v * 100).toFixed(1)}%`) },
      { label: 'A', stroke: '#1a73e8', paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v == null ? '' : formatBytes(v)) },
      { label: 'B', stroke: '#d93025', paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v == null ? '' : formatBytes(v)) },
    ],
  };
  return new uPlot(opts, [x, valuesAt(ax, a.bytes), valuesAt(bx, b.bytes)], el);
}

export function renderCompare(titleEl, bodyEl, data) {
  const { a, b, delta, diff } = data;
  titleEl.textContent = `Comparison: ${a.run}/${a.profile} (A) vs ${b.run}/${b.profile} (B)`;
  const tabs = TABLES.map(([name, label], i) => `<button type="button" class="tab${i === 1 ? ' active' : ''}" data-table="${name}">${label}</button>`).join('');
  bodyEl.innerHTML = `${metricsHtml(a, b, delta)}
    <h3>Memory over each profile's steps <span class="muted">(A blue, B red; the x axis is the fraction of each one's steps)</span></h3>
    <div id="compare-timeline" class="chart"></div>
    <h3 id="compare-change">The change of the peak, ${formatDelta(diff.change)}, attributed <span class="muted">(each table's rows add up to it)</span></h3>
    <div class="tabs" id="compare-tabs">${tabs}</div>
    <div id="compare-rows">${tableHtml(diff, 'op')}</div>
    ${diff.unchanged.count ? `<p class="muted">Unchanged: ${formatCount(diff.unchanged.count)} buffers (${formatBytes(diff.unchanged.bytes)}) at both peaks with the same size.</p>` : ''}
    ${notesHtml(diff.notes)}`;
  bodyEl.querySelectorAll('#compare-tabs .tab').forEach((btn) => btn.addEventListener('click', () => {
    bodyEl.querySelectorAll('#compare-tabs .tab').forEach((x) => x.classList.toggle('active', x === btn));
    bodyEl.querySelector('#compare-rows').innerHTML = tableHtml(diff, btn.dataset.table);
  }));
  drawTimelines(bodyEl.querySelector('#compare-timeline'), data.timeline_a, data.timeline_b);
}
