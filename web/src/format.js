// format.js — number and text formatting shared by the page, and the colours of categories
// and groups (one place, so the legend, bars, rectangles and cards agree).

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

// 1536 -> "1.50 KiB"; exact bytes under 1 KiB.
export function formatBytes(bytes) {
  if (bytes == null || Number.isNaN(bytes)) return '—';
  const neg = bytes < 0;
  let v = Math.abs(bytes);
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  // 2^63 - 1 is where hbm's byte totals saturate (docs/limits.md): never shown as a number
  if (Math.abs(bytes) >= 2 ** 63) return '≥ 8.00 EiB (overflowed)';
  const text = u === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 1 : 2)} ${UNITS[u]}`;
  return neg ? `-${text}` : text;
}

// Axis increments for byte scales: powers of two, so ticks fall on 256 MiB, 512 MiB, 1 GiB...
export const BYTE_INCRS = Array.from({ length: 62 }, (_, i) => 2 ** i);

// An axis label for an offset on a scale whose ticks are `step` bytes apart: in the unit of the
// step, so neighbouring ticks never print the same text ("+1,896 MiB", "+1,904 MiB").
export function formatOffset(bytes, step) {
  let u = 0;
  while (u < UNITS.length - 1 && step * 4 >= 1024 ** (u + 1)) u++; // steps of >= 0.25 unit
  const v = bytes / 1024 ** u;
  const text = Number.isInteger(v) ? v.toLocaleString('en-US') : v.toLocaleString('en-US', { maximumFractionDigits: 2 });
  return `+${text} ${UNITS[u]}`;
}

// Signed difference: "+1.00 MiB" / "-512 B" / "±0".
export function formatDelta(bytes) {
  if (!bytes) return '±0';
  return (bytes > 0 ? '+' : '') + formatBytes(bytes);
}

export function formatCount(n) {
  return n == null ? '—' : Number(n).toLocaleString('en-US');
}

export function formatPercent(fraction) {
  if (fraction == null || !Number.isFinite(fraction)) return '—';
  return `${(fraction * 100).toFixed(fraction < 0.1 ? 2 : 1)}%`;
}

// Nanoseconds since the profile began -> "12.345 ms".
export function formatTime(ns) {
  if (ns == null) return '—';
  if (ns < 1e3) return `${ns} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(2)} µs`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(3)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}

export function escapeHtml(text) {
  return String(text ?? '').replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

// Category names as the API gives them, in XProf's precedence order, with their index in
// hbm_category_t (the allocation rectangles carry the index).
export const CATEGORIES = ['unknown', 'parameter', 'output', 'thread-local', 'constant', 'temporary'];
export const CATEGORY_LABELS = {
  parameter: 'program input (parameter)',
  output: 'program output',
  'thread-local': 'thread-local',
  constant: 'constant',
  temporary: 'temporary',
  unknown: 'unknown',
};
const CATEGORY_COLORS = {
  parameter: '#1a73e8',
  output: '#188038',
  'thread-local': '#9334e6',
  constant: '#80868b',
  temporary: '#e8710a',
  unknown: '#b0b6bd',
};
export function categoryColor(name) {
  return CATEGORY_COLORS[name] || CATEGORY_COLORS.unknown;
}

const GROUP_PALETTE = ['#1a73e8', '#e8710a', '#188038', '#d93025', '#9334e6', '#12b5cb',
  '#f9ab00', '#e52592', '#5f6368', '#0d652d', '#174ea6', '#a50e0e'];

// Colours for group names, largest group first (the API's order), stable for a profile.
export function groupColors(groups) {
  const map = new Map();
  (groups || []).forEach((g, i) => map.set(g.name, GROUP_PALETTE[i % GROUP_PALETTE.length]));
  return map;
}

// "#rrggbb" mixed with white: the padding part of a bar is drawn in the light tone.
export function lighten(hex, amount) {
  const n = parseInt(hex.slice(1), 16);
  const mix = (c) => Math.round(c + (255 - c) * amount);
  const r = mix((n >> 16) & 255), g = mix((n >> 8) & 255), b = mix(n & 255);
  return `#${((1 << 24) | (r << 16) | (g << 8) | b).toString(16).slice(1)}`;
}
