// bars.js — one of the three "buffers at peak" bar charts (program order, size, padding), drawn
// with uPlot's bar paths. Every buffer gets its own bar (XProf hides those under 16 KiB in one
// bar; that is a toggle here, off by default); drag to zoom into a range of bars, double-click
// to see them all again. Each bar is two bars over one another: the full size in a light tone
// and the unpadded size in the full colour, so padding shows as the light cap.
import uPlot from 'uplot';
import { formatBytes, lighten, BYTE_INCRS } from './format.js';

const HEIGHT = 190;
export const SMALL_BYTES = 16 * 1024;

// Merges buffers under SMALL_BYTES into one bar at the end (XProf's "small buffers").
// XProf's "small" bar: last in program order and by padding (it has no unpadded size), and
// placed by its size in the "by size" order, after the buffers as large (a stable sort).
export function mergeSmall(items, order) {
  const big = [];
  const small = { merged: true, id: -1, size: 0, unpadded: 0, count: 0, category: 'unknown', op: null };
  for (const b of items) {
    if (b.size < SMALL_BYTES) {
      small.size += b.size;
      small.unpadded += b.unpadded;
      small.count++;
    } else big.push(b);
  }
  if (!small.count) return big;
  const at = order === 'size' ? big.findIndex((b) => b.size < small.size) : -1;
  big.splice(at < 0 ? big.length : at, 0, small);
  return big;
}

export class BarChart {
  // handlers: onHover(item|null), onClick(item)
  constructor(el, handlers) {
    this.el = el;
    this.handlers = handlers;
    this.plot = null;
    this.items = [];
    this.onResize = () => this.plot && this.plot.setSize({ width: this.width(), height: HEIGHT });
    window.addEventListener('resize', this.onResize);
  }

  width() {
    return Math.max(300, this.el.clientWidth || 800);
  }

  // items: [{id, size, unpadded, category, group, op, shape}]; colorOf(item) -> "#rrggbb"
  show(items, colorOf, logScale) {
    this.items = items;
    const x = items.map((_, i) => i);
    const size = items.map((b) => (logScale ? Math.max(1, b.size) : b.size));
    const unpadded = items.map((b) => (logScale ? Math.max(1, b.unpadded) : b.unpadded));
    const full = items.map((b) => colorOf(b));
    const light = full.map((c) => lighten(c, 0.6));
    const bars = (colors) => uPlot.paths.bars({
      size: [0.85, 60, 1],
      align: 0,
      disp: { fill: { unit: 3, values: () => colors } },
    });
    if (this.plot) this.plot.destroy();
    this.el.innerHTML = '';
    if (!items.length) {
      this.el.innerHTML = '<p class="muted">No buffers are live at the peak in this memory space.</p>';
      this.plot = null;
      return;
    }
    const opts = {
      width: this.width(),
      height: HEIGHT,
      legend: { show: false },
      scales: {
        x: { time: false, range: (u, lo, hi) => [lo - 0.5, hi + 0.5] },
        y: logScale ? { distr: 3, log: 2 } : { range: (u, lo, hi) => [0, hi * 1.05 || 1] },
      },
      axes: [
        { values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) ? String(t) : '')), size: 28 },
        { values: (u, ticks) => ticks.map(formatBytes), incrs: logScale ? undefined : BYTE_INCRS, size: 80 },
      ],
      series: [
        {},
        { label: 'size', width: 0, paths: bars(light), points: { show: false } },
        { label: 'unpadded', width: 0, paths: bars(full), points: { show: false } },
      ],
      cursor: {
        drag: { x: true, y: false },
        points: { show: false },
        bind: { dblclick: (u) => () => { u.setScale('x', { min: -0.5, max: items.length - 0.5 }); return null; } },
      },
      hooks: { setCursor: [(u) => this.onCursor(u)], draw: [(u) => this.drawStubs(u, full)] },
    };
    this.plot = new uPlot(opts, [x, size, unpadded], this.el);
    this.plot.over.addEventListener('click', () => {
      const i = this.plot.cursor.idx;
      if (i != null && this.items[i]) this.handlers.onClick(this.items[i]);
    });
    this.plot.over.addEventListener('mouseleave', () => this.handlers.onHover(null));
  }

  // A bar under two pixels would vanish: draw a two-pixel stub so every buffer stays visible
  // (XProf's users complained that small allocations were hidden).
  drawStubs(u, colors) {
    const ctx = u.ctx;
    const { top, height } = u.bbox;
    const bottom = top + height;
    const min = Math.max(0, Math.ceil(u.scales.x.min)), max = Math.min(this.items.length - 1, Math.floor(u.scales.x.max));
    const barW = Math.max(1, (u.bbox.width / Math.max(1, u.scales.x.max - u.scales.x.min)) * 0.85);
    const stub = 2 * devicePixelRatio;
    for (let i = min; i <= max; i++) {
      const b = this.items[i];
      const y = u.valToPos(Math.max(b.size, 1), 'y', true);
      if (bottom - y >= stub) continue;
      ctx.fillStyle = colors[i];
      ctx.fillRect(u.valToPos(i, 'x', true) - barW / 2, bottom - stub, barW, stub);
    }
  }

  onCursor(u) {
    const i = u.cursor.idx;
    this.handlers.onHover(i != null ? this.items[i] || null : null);
  }

  destroy() {
    window.removeEventListener('resize', this.onResize);
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}
