// summary.js — the header numbers of a memory space, as XProf shows them and a few more: peak
// (and without padding), with fragmentation / peak reserved, padding overhead, arguments and
// outputs, temporaries, limit and device. All from /api/summary (the analysis); data-bytes
// carries the exact value for tests and scripts.
import { formatBytes, formatCount, formatPercent, escapeHtml } from './format.js';

// bytes null: not known (shown as `unknown`, or as `none` text when given).
function stat(id, label, bytes, sub, extraClass = '', unknownText = '—') {
  return `<div class="stat ${extraClass}" id="${id}">
    <div class="label">${label}</div>
    <div class="value" data-bytes="${bytes ?? ''}">${bytes == null ? unknownText : formatBytes(bytes)}</div>
    ${sub ? `<div class="sub">${sub}</div>` : ''}</div>`;
}

// The other categories at the peak by name and share ("parameter 471.1 MiB (95.4%)"), largest
// first: what the rest of the peak is, not one unexplained sum.
function otherCategories(s, except) {
  return Object.entries(s.category_bytes)
    .filter(([name, bytes]) => name !== except && bytes > 0)
    .sort((a, b) => b[1] - a[1])
    .map(([name, bytes]) => `${escapeHtml(name)} ${formatBytes(bytes)} (${formatPercent(s.peak_bytes ? bytes / s.peak_bytes : 0)})`)
    .join(' · ');
}

// Peak reserved of a runtime profile; an RMM log has no reservation events: unknown, as in
// `hbm report`, never "0 B".
function reservedStat(s) {
  if (!s.reserved_known) {
    return stat('stat-frag', 'Peak reserved', null, 'not recorded: the profile has no reservation events', '', 'unknown');
  }
  const frag = s.fragmentation_at_peak >= 0 && s.fragmentation_at_peak <= 1 ? ` · free-space fragmentation ${formatPercent(s.fragmentation_at_peak)}` : '';
  return stat('stat-frag', 'Peak reserved', s.peak_reserved_bytes, `reserved at the peak: ${formatBytes(s.reserved_at_peak)}${frag}`);
}

export function summaryHtml(s, info) {
  const runtime = info.kind === 'runtime';
  const heapFrag = s.heap_bytes > s.peak_bytes && s.heap_bytes > s.indefinite_bytes
    ? (s.heap_bytes - s.peak_bytes) / (s.heap_bytes - s.indefinite_bytes) : 0;
  const padShare = s.peak_bytes ? s.padding_bytes / s.peak_bytes : 0;
  const limitShare = s.limit_bytes ? s.peak_bytes / s.limit_bytes : null;
  const over = s.limit_bytes && s.peak_bytes > s.limit_bytes;
  const where = s.peak_step >= 0
    ? `at ${runtime ? 'event' : 'step'} ${formatCount(s.peak_step)}${s.peak_label ? ` (${escapeHtml(s.peak_label)})` : ''}`
    : 'nothing allocated';
  const parts = [
    stat('stat-peak', 'Peak memory allocation', s.peak_bytes,
      s.padding_bytes ? `${where}<br>without padding: <span id="peak-unpadded">${formatBytes(s.peak_unpadded_bytes)}</span>` : where,
      over ? 'alert' : 'main'),
    runtime ? reservedStat(s) : stat('stat-frag', 'With fragmentation', s.heap_bytes, `${formatPercent(heapFrag)} fragmentation`),
    s.padding_bytes
      ? stat('stat-padding', 'Padding overhead', s.padding_bytes, `${formatPercent(padShare)} of the peak`, padShare > 0.2 ? 'warn' : '')
      : stat('stat-padding', 'Padding overhead', 0, 'no buffer at the peak is padded'),
    stat('stat-args', 'Arguments (program inputs)', s.argument_bytes, `outputs: ${formatBytes(s.output_bytes)}`),
    // A runtime profile has no whole-program buffers, so "peak − indefinite" would count the
    // weights as temporaries: show the temporary category there (both come from the analysis).
    runtime
      ? stat('stat-temps', 'Temporaries', s.category_bytes.temporary || 0,
        `${formatPercent(s.peak_bytes ? (s.category_bytes.temporary || 0) / s.peak_bytes : 0)} of the peak${otherCategories(s, 'temporary') ? `; the rest: ${otherCategories(s, 'temporary')}` : ''}`)
      : stat('stat-temps', 'Temporaries', s.temporary_bytes, `live for the whole program: ${formatBytes(s.indefinite_bytes)}`),
    stat('stat-limit', 'Limit', s.limit_bytes || null,
      `${escapeHtml(s.device || info.meta?.device || '')}${limitShare != null ? ` · peak is ${formatPercent(limitShare)}` : ''}`, over ? 'alert' : ''),
  ];
  const counts = `<div class="counts">${formatCount(s.n_buffers)} buffers · ${formatCount(s.n_steps)} ${runtime ? 'events' : 'steps'} ·
    ${formatCount(s.n_buffers_at_peak)} live at the peak${s.n_oom ? ` · <b class="oom">${s.n_oom} OOM event${s.n_oom > 1 ? 's' : ''}</b>` : ''}
    · ${escapeHtml(info.kind)} profile ${escapeHtml(info.name || '')}</div>`;
  // An XProf program: hbm's own plan of the module beside XLA's buffer assignment.
  const plan = info.meta?.[`hbm_plan:${s.device}`];
  const planLine = plan ? `<div class="counts" id="hbm-plan">${escapeHtml(plan)}</div>` : '';
  return parts.join('') + counts + planLine;
}
