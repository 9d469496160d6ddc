// compare.js — the "compare with…" panel: two profiles' peaks side by side and the ops whose
// bytes at the peak changed most (from /api/compare; both peaks come from the analysis).
import { formatBytes, formatDelta, formatCount, escapeHtml } from './format.js';

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

function deltaCell(delta) {
  if (delta == null) return '<td class="num muted">—</td>'; // unknown on one side (reserved of an RMM log)
  const cls = delta > 0 ? 'up' : delta < 0 ? 'down' : '';
  return `<td class="num ${cls}">${formatDelta(delta)}</td>`;
}

export function renderCompare(titleEl, bodyEl, data) {
  const { a, b, delta, ops } = data;
  titleEl.textContent = `Comparison: ${a.run}/${a.profile} (A) vs ${b.run}/${b.profile} (B)`;
  const rows = METRICS.map(([key, label]) => `<tr><th>${label}</th>
    <td class="num">${a[key] == null ? 'unknown' : formatBytes(a[key])}</td><td class="num">${b[key] == null ? 'unknown' : formatBytes(b[key])}</td>${deltaCell(delta[key])}</tr>`);
  rows.push(`<tr><th>Buffers live at the peak</th><td class="num">${formatCount(a.n_buffers_at_peak)}</td>
    <td class="num">${formatCount(b.n_buffers_at_peak)}</td><td class="num">${delta.n_buffers_at_peak > 0 ? '+' : ''}${delta.n_buffers_at_peak}</td></tr>`);
  const opRows = ops.map((o) => `<tr><td class="opname">${escapeHtml(o.op)}</td>
    <td class="num">${formatBytes(o.a_bytes)} <span class="muted">×${o.a_count}</span></td>
    <td class="num">${formatBytes(o.b_bytes)} <span class="muted">×${o.b_count}</span></td>${deltaCell(o.delta)}</tr>`);
  bodyEl.innerHTML = `
    <table class="compare" id="compare-metrics"><thead><tr><th></th><th>A (this)</th><th>B</th><th>B − A</th></tr></thead>
    <tbody>${rows.join('')}</tbody></table>
    <h3>Ops at the peak that changed most${data.n_ops > ops.length ? ` (top ${ops.length} of ${data.n_ops})` : ''}</h3>
    <table class="compare" id="compare-ops"><thead><tr><th>op</th><th>A</th><th>B</th><th>B − A</th></tr></thead>
    <tbody>${opRows.join('') || '<tr><td colspan="4" class="muted">no buffers at either peak</td></tr>'}</tbody></table>`;
}
