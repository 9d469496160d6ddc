// alloc_view.js — the allocation timeline: every buffer as a rectangle, time (steps) across,
// address/offset up, on a canvas. The server sends the largest rectangles of the visible window
// (a few thousand), so a profile of a million events pans and zooms at canvas speed: the last
// rectangles are redrawn at once and the window's own arrive a moment later. Search by op name
// highlights the matches; OOM events are red markers whose diagnosis shows on hover and click.
// Up is not the raw address but a row of the server's layout (src/viewer/layout.c): each
// allocation of a plan (the temp heap, every argument, output, constant) in a band of its own,
// and a runtime profile's never-used address gaps cut out; bands are separated by lines and
// named, and the axis gives offsets inside each band.
import { formatBytes, formatOffset, escapeHtml, categoryColor, groupColors, CATEGORIES } from './format.js';

const HEIGHT = 380;
const M = { left: 84, right: 12, top: 18, bottom: 26 };
const LIMIT = 4000;
const MATCH_LIMIT = 3000;

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

function niceBytesStep(span, count) {
  const raw = span / Math.max(1, count);
  let step = 1;
  while (step * 2 <= raw) step *= 2;
  return step * 2 <= raw * 1.5 ? step * 2 : step;
}

// By group (when no buffer has a category, as in a PyTorch snapshot): the groups' colours of
// the summary's bars (largest first), the last class ("other") grey.
function classColor(classes) {
  const colors = groupColors(classes.slice(0, -1).map((name) => ({ name })));
  return (name) => colors.get(name) || categoryColor('unknown');
}

export class AllocView {
  // api: {fetchRects(args) -> Promise, onRectClick(id), onOomClick(event)}
  constructor(canvas, wrap, tooltip, infoEl, api) {
    this.canvas = canvas;
    this.wrap = wrap;
    this.tooltip = tooltip;
    this.infoEl = infoEl;
    this.api = api;
    this.rects = null;
    this.matches = null;
    this.query = '';
    this.ooms = [];
    this.ticket = 0;
    this.matchTicket = 0;
    this.drag = null;
    this.bind();
  }

  // The request for a whole space, so a view can ask for it while other requests run.
  fetchAll() {
    this.resize();
    return this.api.fetchRects(this.firstArgs());
  }

  firstArgs() {
    return { limit: LIMIT, cols: Math.round(this.plotW() / 2), rows: Math.round(this.plotH() / 2) };
  }

  // A fresh profile/space (data: the answer of fetchAll, when already asked).
  async show(summary, kind, ooms, data) {
    this.summary = summary;
    this.kind = kind;
    this.ooms = ooms || [];
    this.rects = null;
    this.matches = null;
    this.extent = 0;
    this.view = { x0: 0, x1: Math.max(1, summary.n_steps), y0: 0, y1: 1 };
    this.resize();
    await this.fetch(true, data);
    if (this.query) await this.search(this.query);
  }

  bind() {
    const c = this.canvas;
    c.addEventListener('wheel', (e) => this.onWheel(e), { passive: false });
    c.addEventListener('mousedown', (e) => {
      this.drag = { x: e.offsetX, y: e.offsetY, view: { ...this.view }, moved: false };
    });
    window.addEventListener('mouseup', (e) => {
      if (this.drag && !this.drag.moved && e.target === c) this.onClick(e);
      if (this.drag && this.drag.moved) this.scheduleFetch();
      this.drag = null;
    });
    c.addEventListener('mousemove', (e) => this.onMove(e));
    c.addEventListener('mouseleave', () => { this.tooltip.hidden = true; });
    c.addEventListener('dblclick', () => this.reset());
    window.addEventListener('resize', () => { this.resize(); this.draw(); });
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    this.width = Math.max(320, this.wrap.clientWidth || 800);
    this.height = HEIGHT;
    this.canvas.width = Math.round(this.width * dpr);
    this.canvas.height = Math.round(this.height * dpr);
    this.canvas.style.width = `${this.width}px`;
    this.canvas.style.height = `${this.height}px`;
    this.dpr = dpr;
  }

  plotW() { return this.width - M.left - M.right; }
  plotH() { return this.height - M.top - M.bottom; }
  X(step) { return M.left + ((step - this.view.x0) / (this.view.x1 - this.view.x0)) * this.plotW(); }
  Y(off) { return M.top + this.plotH() - ((off - this.view.y0) / (this.view.y1 - this.view.y0)) * this.plotH(); }
  stepAt(px) { return this.view.x0 + ((px - M.left) / this.plotW()) * (this.view.x1 - this.view.x0); }
  offAt(py) { return this.view.y0 + ((M.top + this.plotH() - py) / this.plotH()) * (this.view.y1 - this.view.y0); }

  windowArgs() {
    const v = this.view;
    return {
      from: Math.max(0, Math.floor(v.x0)),
      to: Math.min(this.summary.n_steps, Math.ceil(v.x1)),
      lo: Math.max(0, Math.floor(v.y0)),
      hi: Math.max(1, Math.ceil(v.y1)),
      // one overview cell per 2×2 pixels (drawn under the rectangles when they are too many)
      cols: Math.max(1, Math.round(this.plotW() / 2)),
      rows: Math.max(1, Math.round(this.plotH() / 2)),
    };
  }

  async fetch(first, ready) {
    const ticket = ++this.ticket;
    const args = first ? this.firstArgs() : { ...this.windowArgs(), limit: LIMIT };
    const t0 = performance.now();
    const data = ready ? await ready : await this.api.fetchRects(args);
    if (ticket !== this.ticket) return;
    if (first) {
      this.extent = Math.max(1, data.extent) * 1.03; // headroom above the highest buffer
      this.view.y1 = this.extent;
      this.bands = data.bands || [];
    }
    this.rects = data;
    this.lastFetchMs = performance.now() - t0;
    this.draw();
    this.describe();
  }

  scheduleFetch() {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => {
      this.fetch(false).catch((err) => { this.infoEl.textContent = err.message; });
      if (this.query) this.search(this.query);
    }, 60);
  }

  async search(q) {
    this.query = q;
    const ticket = ++this.matchTicket;
    if (!q) {
      this.matches = null;
      this.draw();
      this.describe();
      return;
    }
    const data = await this.api.fetchRects({ ...this.windowArgs(), q, limit: MATCH_LIMIT });
    if (ticket !== this.matchTicket) return;
    this.matches = data;
    this.draw();
    this.describe();
  }

  describe() {
    const r = this.rects;
    if (!r) return;
    let text = r.shown < r.matched
      ? `showing the ${r.shown.toLocaleString('en-US')} largest of ${r.matched.toLocaleString('en-US')} buffers in view (zoom in to see the rest)`
      : `${r.shown.toLocaleString('en-US')} buffers in view`;
    if (this.ooms.length) text += ` · ${this.ooms.length} OOM event${this.ooms.length > 1 ? 's' : ''} (red)`;
    this.infoEl.textContent = text;
    this.canvas.dataset.shown = String(r.shown);
    const m = this.matches;
    const out = document.getElementById('alloc-matches');
    if (out) {
      out.textContent = m ? `${m.matched.toLocaleString('en-US')} match${m.matched === 1 ? '' : 'es'} (${formatBytes(m.matched_bytes)})` : '';
    }
    this.canvas.dataset.matched = m ? String(m.matched) : '';
  }

  // ---- drawing ----

  draw() {
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.clearRect(0, 0, this.width, this.height);
    ctx.fillStyle = '#fbfcfe';
    ctx.fillRect(M.left, M.top, this.plotW(), this.plotH());
    if (!this.rects) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(M.left, M.top, this.plotW(), this.plotH());
    ctx.clip();
    const dim = this.matches != null;
    this.drawDensity(ctx, this.rects, dim ? 0.22 : 0.9, null);
    this.drawRects(ctx, this.rects, dim ? 0.22 : 1, null);
    if (this.matches) {
      this.drawDensity(ctx, this.matches, 1, [255, 109, 0]);
      this.drawRects(ctx, this.matches, 1, '#ff6d00');
    }
    this.drawBands(ctx);
    this.drawLines(ctx);
    ctx.restore();
    this.drawAxes(ctx);
    this.drawOomMarkers(ctx);
  }

  // The overview raster (density.c): each cell's coverage as opacity, in its main category's
  // colour, stretched over the window it was computed for.
  drawDensity(ctx, data, alpha, rgb) {
    const d = data.density;
    if (!d) return;
    if (data.densityImage === undefined) data.densityImage = this.densityImage(d, rgb);
    const x0 = this.X(data.from), x1 = this.X(data.to);
    const yTop = this.Y(data.hi), yBottom = this.Y(data.lo);
    ctx.globalAlpha = alpha;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(data.densityImage, x0, yTop, x1 - x0, yBottom - yTop);
    ctx.globalAlpha = 1;
  }

  densityImage(d, rgb) {
    const bytes = atob(d.cells);
    const img = new ImageData(d.cols, d.rows);
    // each cell's main class: a category, or (by group: PyTorch snapshots) one of d.classes
    const levels = d.levels || 42;
    const colors = (d.classes ? d.classes.map(classColor(d.classes)) : CATEGORIES.map(categoryColor)).map((hex) => {
      const n = parseInt(hex.slice(1), 16);
      return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
    });
    for (let r = 0; r < d.rows; r++) {
      const dst = (d.rows - 1 - r) * d.cols; // row 0 is the lowest offset: bottom of the image
      for (let c = 0; c < d.cols; c++) {
        const v = bytes.charCodeAt(r * d.cols + c);
        const cov = v % levels;
        if (!cov) continue;
        const [red, green, blue] = rgb || colors[Math.floor(v / levels)] || colors[0];
        const o = (dst + c) * 4;
        img.data[o] = red;
        img.data[o + 1] = green;
        img.data[o + 2] = blue;
        img.data[o + 3] = Math.round(60 + (195 * cov) / (levels - 1));
      }
    }
    const canvas = document.createElement('canvas');
    canvas.width = d.cols;
    canvas.height = d.rows;
    canvas.getContext('2d').putImageData(img, 0, 0);
    return canvas;
  }

  drawRects(ctx, data, alpha, highlight) {
    const r = data.rects;
    const n = r.id.length;
    const byColor = new Map();
    ctx.globalAlpha = alpha;
    const byGroup = r.classes ? classColor(r.classes) : null;
    for (let i = 0; i < n; i++) {
      const color = highlight || (byGroup ? byGroup(r.classes[r.class[i]]) : categoryColor(CATEGORIES[r.category[i]] || 'unknown'));
      let list = byColor.get(color);
      if (!list) byColor.set(color, (list = []));
      list.push(i);
    }
    const outline = [];
    for (const [color, list] of byColor) {
      ctx.fillStyle = color;
      for (const i of list) {
        const x = this.X(r.start[i]);
        const w = Math.max(1, this.X(r.end[i]) - x);
        const y = this.Y(r.offset[i] + r.size[i]);
        const h = Math.max(1, this.Y(r.offset[i]) - y);
        ctx.fillRect(x, y, w, h);
        if (w > 4 && h > 4) outline.push([x, y, w, h]);
      }
    }
    ctx.strokeStyle = highlight ? '#202124' : 'rgba(255,255,255,0.75)';
    ctx.lineWidth = highlight ? 1 : 0.75;
    for (const [x, y, w, h] of outline) ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
    ctx.globalAlpha = 1;
  }

  // The band of a row (bands are sorted by row).
  bandAt(row) {
    const b = this.bands || [];
    let lo = 0, hi = b.length;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (b[mid].row <= row) lo = mid; else hi = mid;
    }
    return b[lo] || null;
  }

  // A line between two bands, and each band's name where it is tall enough to read.
  drawBands(ctx) {
    const bands = this.bands || [];
    if (bands.length < 2) return;
    ctx.font = '11px sans-serif';
    ctx.textAlign = 'right';
    for (const b of bands) {
      const y0 = this.Y(b.row), y1 = this.Y(b.row + b.size);
      if (y0 < M.top || y1 > M.top + this.plotH() + 0.5) continue; // (partly) out of view
      ctx.strokeStyle = '#5f6368';
      ctx.setLineDash([6, 3]);
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(M.left, Math.round(y0) + 0.5);
      ctx.lineTo(M.left + this.plotW(), Math.round(y0) + 0.5);
      ctx.stroke();
      ctx.setLineDash([]);
      if (y0 - y1 >= 13) {
        const text = `${b.label} · ${formatBytes(b.size)}`;
        const w = ctx.measureText(text).width;
        const x = M.left + this.plotW() - 4;
        ctx.fillStyle = 'rgba(255,255,255,0.8)';
        ctx.fillRect(x - w - 3, y0 - 14, w + 6, 13);
        ctx.fillStyle = '#3c4043';
        ctx.fillText(text, x, y0 - 4);
      }
    }
    ctx.textAlign = 'left';
  }

  drawLines(ctx) {
    const s = this.summary;
    const top = M.top, bottom = M.top + this.plotH();
    if (s.peak_step >= 0) {
      const x = this.X(s.peak_step);
      ctx.strokeStyle = '#f29900';
      ctx.setLineDash([5, 4]);
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = '#b06000';
      ctx.font = '11px sans-serif';
      ctx.fillText('peak', x + 4, top + 12);
    }
    ctx.strokeStyle = '#d93025';
    ctx.lineWidth = 1.5;
    for (const ev of this.ooms) {
      const x = this.X(ev.step);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, bottom);
      ctx.stroke();
    }
  }

  drawOomMarkers(ctx) {
    ctx.fillStyle = '#d93025';
    for (const ev of this.ooms) {
      const x = this.X(ev.step);
      if (x < M.left - 1 || x > M.left + this.plotW() + 1) continue;
      ctx.beginPath();
      ctx.moveTo(x - 6, 2);
      ctx.lineTo(x + 6, 2);
      ctx.lineTo(x, M.top - 2);
      ctx.closePath();
      ctx.fill();
    }
  }

  drawAxes(ctx) {
    const v = this.view;
    ctx.fillStyle = '#5f6368';
    ctx.strokeStyle = '#dadce0';
    ctx.font = '11px sans-serif';
    ctx.lineWidth = 1;
    const xs = Math.max(1, niceStep(v.x1 - v.x0, this.plotW() / 90)); // steps are whole
    ctx.textAlign = 'center';
    for (let s = Math.ceil(v.x0 / xs) * xs; s <= v.x1; s += xs) {
      const x = this.X(s);
      ctx.beginPath();
      ctx.moveTo(x, M.top + this.plotH());
      ctx.lineTo(x, M.top + this.plotH() + 4);
      ctx.stroke();
      const text = Math.round(s).toLocaleString('en-US');
      const half = ctx.measureText(text).width / 2;
      ctx.fillText(text, Math.min(x, this.width - half - 2), this.height - 8);
    }
    // Offsets inside each band, from its own bottom ("+0" where it starts), a tick every
    // 50 pixels or so; labels that would touch the previous one are left out.
    ctx.textAlign = 'right';
    const bands = this.bands && this.bands.length ? this.bands : [{ row: 0, size: this.extent }];
    const perPixel = (v.y1 - v.y0) / this.plotH();
    let lastY = Infinity;
    for (const b of bands) {
      const lo = Math.max(v.y0, b.row), hi = Math.min(v.y1, b.row + b.size);
      if (hi <= lo) continue;
      const ys = niceBytesStep(Math.max(1, (v.y1 - v.y0)), this.plotH() / 50);
      if (b.size / perPixel < 14 && b.row < v.y0) continue; // too thin to label
      for (let o = Math.ceil((lo - b.row) / ys) * ys; b.row + o <= hi; o += ys) {
        const y = this.Y(b.row + o);
        if (lastY - y < 14) continue;
        ctx.beginPath();
        ctx.moveTo(M.left - 4, y);
        ctx.lineTo(M.left, y);
        ctx.stroke();
        ctx.fillText(formatOffset(o, ys), M.left - 6, y + 4);
        lastY = y;
      }
    }
    ctx.textAlign = 'left';
    ctx.strokeRect(M.left + 0.5, M.top + 0.5, this.plotW() - 1, this.plotH() - 1);
  }

  // ---- interaction ----

  onWheel(e) {
    e.preventDefault();
    const factor = e.deltaY < 0 ? 0.8 : 1.25;
    const v = this.view;
    if (e.shiftKey) {
      const at = this.offAt(e.offsetY);
      const span = Math.min(this.extent, Math.max(256, (v.y1 - v.y0) * factor));
      const lo = Math.max(0, Math.min(at - (at - v.y0) * factor, this.extent - span));
      v.y0 = lo;
      v.y1 = lo + span;
    } else {
      const n = this.summary.n_steps;
      const at = this.stepAt(e.offsetX);
      const span = Math.min(n, Math.max(4, (v.x1 - v.x0) * factor));
      const lo = Math.max(0, Math.min(at - (at - v.x0) * factor, n - span));
      v.x0 = lo;
      v.x1 = lo + span;
    }
    this.draw();
    this.scheduleFetch();
  }

  onMove(e) {
    if (this.drag) {
      const dx = e.offsetX - this.drag.x, dy = e.offsetY - this.drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) this.drag.moved = true;
      if (this.drag.moved) {
        const v0 = this.drag.view;
        const sx = ((v0.x1 - v0.x0) / this.plotW()) * dx;
        const sy = ((v0.y1 - v0.y0) / this.plotH()) * dy;
        const n = this.summary.n_steps;
        const spanX = v0.x1 - v0.x0, spanY = v0.y1 - v0.y0;
        const x0 = Math.max(0, Math.min(v0.x0 - sx, n - spanX));
        const y0 = Math.max(0, Math.min(v0.y0 + sy, this.extent - spanY));
        this.view = { x0, x1: x0 + spanX, y0, y1: y0 + spanY };
        this.draw();
        this.tooltip.hidden = true;
        return;
      }
    }
    this.hover(e);
  }

  hitOom(px, py) {
    for (const ev of this.ooms) {
      const x = this.X(ev.step);
      if (Math.abs(px - x) <= 6 && (py <= M.top + 2 || Math.abs(px - x) <= 3)) return ev;
    }
    return null;
  }

  hitRect(px, py) {
    for (const data of [this.matches, this.rects]) {
      if (!data) continue;
      const r = data.rects;
      for (let i = r.id.length - 1; i >= 0; i--) {
        const x = this.X(r.start[i]);
        const w = Math.max(1, this.X(r.end[i]) - x);
        const y = this.Y(r.offset[i] + r.size[i]);
        const h = Math.max(1, this.Y(r.offset[i]) - y);
        if (px >= x - 0.5 && px <= x + w + 0.5 && py >= y - 0.5 && py <= y + h + 0.5) {
          return { id: r.id[i], op: r.op[i] >= 0 ? r.ops[r.op[i]] : null, size: r.size[i],
            start: r.start[i], end: r.end[i], offset: r.offset[i], category: CATEGORIES[r.category[i]] };
        }
      }
    }
    return null;
  }

  hover(e) {
    const px = e.offsetX, py = e.offsetY;
    const oom = this.hitOom(px, py);
    let html = null;
    if (oom) {
      const first = (oom.message || '').split('\n').slice(0, 6).join('\n');
      html = `<b class="oom">OOM at ${this.kind === 'runtime' ? 'event' : 'step'} ${oom.step}</b> — requested ${formatBytes(oom.requested)}, in use ${formatBytes(oom.bytes_in_use)}<pre>${escapeHtml(first)}</pre><span class="muted">click for the full diagnosis</span>`;
    } else if (px >= M.left && py >= M.top && py <= M.top + this.plotH()) {
      const hit = this.hitRect(px, py);
      if (hit) {
        const band = this.bandAt(hit.offset);
        const where = band ? `${escapeHtml(band.label)} +${formatBytes(hit.offset - band.row)}` : `+${formatBytes(hit.offset)}`;
        html = `<b>${escapeHtml(hit.op || '(untagged)')}</b><br>${formatBytes(hit.size)} · ${escapeHtml(hit.category)}<br>steps ${hit.start} → ${hit.end} · ${where}`;
      }
    }
    if (!html) {
      this.tooltip.hidden = true;
      this.canvas.style.cursor = 'grab';
      return;
    }
    this.canvas.style.cursor = 'pointer';
    this.tooltip.innerHTML = html;
    this.tooltip.hidden = false;
    const x = Math.min(e.clientX + 14, window.innerWidth - this.tooltip.offsetWidth - 8);
    const y = Math.min(e.clientY + 14, window.innerHeight - this.tooltip.offsetHeight - 8);
    this.tooltip.style.left = `${x}px`;
    this.tooltip.style.top = `${y}px`;
  }

  onClick(e) {
    const oom = this.hitOom(e.offsetX, e.offsetY);
    if (oom) {
      this.api.onOomClick(oom);
      return;
    }
    const hit = this.hitRect(e.offsetX, e.offsetY);
    if (hit) this.api.onRectClick(hit.id);
  }

  // Shows steps [from, to) (the memory timeline's zoom, when the two are linked).
  showSteps(from, to) {
    if (!this.summary) return;
    this.view.x0 = Math.max(0, from);
    this.view.x1 = Math.min(this.summary.n_steps, Math.max(from + 1, to));
    this.draw();
    this.scheduleFetch();
  }

  reset() {
    this.view = { x0: 0, x1: Math.max(1, this.summary.n_steps), y0: 0, y1: this.extent || 1 };
    this.draw();
    this.scheduleFetch();
  }

  // Zooms to where the matches are (the whole time range of the largest matches).
  fitMatches() {
    const m = this.matches;
    if (!m || !m.rects.id.length) return;
    const r = m.rects;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (let i = 0; i < r.id.length; i++) {
      x0 = Math.min(x0, r.start[i]);
      x1 = Math.max(x1, r.end[i]);
      y0 = Math.min(y0, r.offset[i]);
      y1 = Math.max(y1, r.offset[i] + r.size[i]);
    }
    const px = Math.max(2, (x1 - x0) * 0.05), py = Math.max(256, (y1 - y0) * 0.05);
    this.view = {
      x0: Math.max(0, x0 - px), x1: Math.min(this.summary.n_steps, x1 + px),
      y0: Math.max(0, y0 - py), y1: Math.min(this.extent, y1 + py),
    };
    this.draw();
    this.scheduleFetch();
  }
}
