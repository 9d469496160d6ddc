// timeline.js — "Memory allocation over program order": the memory in use at each step (size
// and unpadded size; reserved memory as a second line for runtime profiles that recorded it —
// an RMM log did not, and a line at 0 would say it had none), drawn with uPlot.
// The server downsamples to about one point per pixel keeping each bucket's maximum, so the
// exact peak is always drawn; zooming (drag or wheel) asks the server for the visible window
// again, so detail appears as one zooms in.
import uPlot from 'uplot';
import { formatBytes, formatTime, escapeHtml, BYTE_INCRS } from './format.js';

const HEIGHT = 280;
// Steps and events are whole numbers: ticks 1, 2, 5, 10, 20, 50... apart, never 0.2.
const STEP_INCRS = Array.from({ length: 48 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

// The name of a marker as `hbm report` prints it, without repeating the step's number
// ("step 1", not "step 1 1"); a step's end reads "end of step 1".
export function markerLabel(m) {
  const number = m.value != null ? String(m.value) : '';
  if (m.kind === 'step_begin' || m.kind === 'step_end') {
    let text = m.text || 'step';
    if (number && !new RegExp(`(^|\\D)${number}$`).test(text)) text = `${text} ${number}`;
    if (m.kind === 'step_end' && !/^end\b/.test(text)) text = `end of ${text}`;
    return text;
  }
  return m.text || '';
}

export class Timeline {
  // fetchWindow(from, to, points) -> Promise<timeline JSON>; onPick(step) on a click
  constructor(el, hoverEl, fetchWindow, onPick) {
    this.el = el;
    this.hoverEl = hoverEl;
    this.fetchWindow = fetchWindow;
    this.onPick = onPick;
    this.picked = null;
    this.plot = null;
    this.data = null;
    this.summary = null;
    this.kind = 'plan';
    this.pending = 0;
    this.onResize = () => this.resize();
    window.addEventListener('resize', this.onResize);
  }

  // The request for a whole space, so a view can ask for it while other requests run.
  fetchAll() {
    return this.fetchWindow(undefined, undefined, this.points());
  }

  // A fresh profile/space: full range (data: the answer of fetchAll, when already asked).
  async show(summary, kind, data) {
    this.summary = summary;
    this.kind = kind;
    this.nSteps = summary.n_steps;
    this.hasReserved = kind === 'runtime' && !!summary.reserved_known;
    // Reserved memory far above the peak (a preallocated pool) would flatten the curve that
    // matters: then the line starts hidden (the header still gives the number).
    this.showReserved = summary.peak_reserved_bytes <= 3 * summary.peak_bytes;
    await this.load(0, this.nSteps, true, data);
    if (this.plot && this.hasReserved) this.plot.setSeries(3, { show: this.showReserved });
  }

  setReservedShown(show) {
    this.showReserved = show;
    if (this.plot && this.hasReserved) this.plot.setSeries(3, { show });
  }

  width() {
    return Math.max(300, this.el.clientWidth || 800);
  }

  points() {
    return Math.min(4000, this.width());
  }

  async load(from, to, rebuild, ready) {
    const ticket = ++this.pending;
    const data = ready ? await ready : await this.fetchWindow(from, to, this.points());
    if (ticket !== this.pending) return; // a newer zoom superseded this one
    this.data = data;
    this.range = [from, to];
    // A new profile of another kind has other series: build anew; else new data will do.
    const shape = `${this.kind}/${this.hasReserved}`; // which series there are
    if (!this.plot || (rebuild && this.builtKind !== shape)) this.build();
    else this.update();
  }

  seriesData() {
    const d = this.data;
    const cols = [d.step, d.bytes, d.unpadded];
    if (this.hasReserved) cols.push(d.reserved);
    return cols;
  }

  build() {
    if (this.plot) this.plot.destroy();
    this.builtKind = `${this.kind}/${this.hasReserved}`;
    this.el.innerHTML = '';
    const runtime = this.kind === 'runtime';
    const series = [
      { label: runtime ? 'event' : 'step' },
      { label: 'Size', stroke: '#1a73e8', fill: 'rgba(26,115,232,0.10)', width: 1.5 },
      { label: 'Unpadded size', stroke: '#188038', width: 1.2 },
    ];
    if (this.hasReserved) series.push({ label: 'Reserved', stroke: '#9334e6', width: 1.2 });
    const opts = {
      width: this.width(),
      height: HEIGHT,
      legend: { show: false },
      scales: { x: { time: false, range: () => this.xRange() }, y: { range: (u, lo, hi) => this.yRange(hi) } },
      axes: [
        { label: runtime ? 'allocator event' : 'program order (HLO sequence)', size: 40, incrs: STEP_INCRS },
        { values: (u, ticks) => ticks.map(formatBytes), incrs: BYTE_INCRS, size: 80, label: 'memory' },
      ],
      series,
      cursor: {
        drag: { x: true, y: false, setScale: false },
        bind: { dblclick: () => () => null },
        points: { size: 6 },
      },
      hooks: {
        setSelect: [(u) => this.onSelect(u)],
        setCursor: [(u) => this.onCursor(u)],
        draw: [(u) => this.drawMarks(u)],
      },
    };
    this.plot = new uPlot(opts, this.seriesData(), this.el);
    this.plot.over.addEventListener('dblclick', () => this.reset());
    this.plot.over.addEventListener('click', () => {
      if (this.justZoomed) { // the end of a drag to zoom is not a pick
        this.justZoomed = false;
        return;
      }
      const i = this.plot.cursor.idx;
      if (i != null && this.data && i < this.data.step.length) this.onPick(this.data.step[i]);
    });
    this.plot.over.addEventListener('wheel', (e) => this.onWheel(e), { passive: false });
  }

  update() {
    this.plot.setData(this.seriesData(), true);
  }

  xRange() {
    const [from, to] = this.range || [0, 1];
    return [from, Math.max(from + 1, to - 1)];
  }

  // Keeps the limit in view when it is near the peak (an OOM is then visible as a crossing).
  yRange(hi) {
    const limit = this.summary?.limit_bytes || 0;
    let top = Math.max(hi || 0, this.summary?.peak_bytes || 0);
    if (limit && limit < top * 2) top = Math.max(top, limit);
    return [0, top * 1.05 || 1];
  }

  // The profile's markers (step begins, user text): drawn when few enough are in view.
  setMarkers(markers) {
    this.markers = markers || [];
    if (this.plot) this.plot.redraw(false, false);
  }

  // Marks the step whose buffers are shown (null: the peak's).
  setPicked(step) {
    this.picked = step;
    if (this.plot) this.plot.redraw(false, false);
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: this.width(), height: HEIGHT });
  }

  reset() {
    if (this.onZoom) this.onZoom(0, this.nSteps);
    return this.load(0, this.nSteps, false);
  }

  zoomTo(from, to) {
    from = Math.max(0, Math.floor(from));
    to = Math.min(this.nSteps, Math.ceil(to));
    if (to - from < 2) to = Math.min(this.nSteps, from + 2);
    if (this.onZoom) this.onZoom(from, to); // the allocation timeline follows, when linked
    return this.load(from, to, false);
  }

  onSelect(u) {
    const sel = u.select;
    if (sel.width < 3) return;
    this.justZoomed = true;
    const from = u.posToVal(sel.left, 'x');
    const to = u.posToVal(sel.left + sel.width, 'x') + 1;
    u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    this.zoomTo(from, to);
  }

  onWheel(e) {
    e.preventDefault();
    const u = this.plot;
    const [from, to] = this.range;
    const at = u.posToVal(e.offsetX, 'x');
    const factor = e.deltaY < 0 ? 0.75 : 1 / 0.75;
    const span = Math.max(2, (to - from) * factor);
    const left = at - (at - from) * factor;
    const a = Math.max(0, Math.min(left, this.nSteps - span));
    this.zoomTo(a, a + span);
  }

  onCursor(u) {
    const i = u.cursor.idx;
    const d = this.data;
    if (i == null || !d || i >= d.step.length) {
      this.hoverEl.innerHTML = '&nbsp;';
      return;
    }
    const op = d.op[i] >= 0 ? d.ops[d.op[i]] : null;
    const ev = d.event[i] === 1 ? 'alloc' : d.event[i] === 2 ? 'free' : '';
    const parts = [
      `<b>${this.kind === 'runtime' ? 'event' : 'step'} ${d.step[i]}</b>`,
      op ? `<span class="op">${ev ? `${ev} ` : ''}${escapeHtml(op)}</span>` : '',
      `size <b>${formatBytes(d.bytes[i])}</b>`,
      `unpadded ${formatBytes(d.unpadded[i])}`,
    ];
    if (this.hasReserved) parts.push(`reserved ${formatBytes(d.reserved[i])}`);
    if (this.kind === 'runtime') parts.push(formatTime(d.time_ns[i]));
    this.hoverEl.innerHTML = parts.filter(Boolean).join(' · ');
    this.hoverEl.dataset.step = d.step[i];
    this.hoverEl.dataset.op = op || '';
  }

  // The peak (a labelled line and point) and the limit (a dashed line).
  drawMarks(u) {
    const s = this.summary;
    if (!s) return;
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    ctx.textAlign = 'left'; // uPlot leaves its axis alignment behind
    ctx.textBaseline = 'alphabetic';
    if (s.limit_bytes) {
      const y = u.valToPos(s.limit_bytes, 'y', true);
      if (y >= top && y <= top + height) {
        ctx.strokeStyle = '#d93025';
        ctx.setLineDash([4, 4]);
        ctx.lineWidth = 1;
        ctx.beginPath();
        ctx.moveTo(left, y);
        ctx.lineTo(left + width, y);
        ctx.stroke();
        ctx.setLineDash([]);
        ctx.fillStyle = '#d93025';
        ctx.font = `${11 * devicePixelRatio}px sans-serif`;
        ctx.fillText(`limit ${formatBytes(s.limit_bytes)}`, left + 6, y - 4);
      }
    }
    this.drawMarkers(u, ctx);
    if (this.picked != null) {
      const x = u.valToPos(this.picked, 'x', true);
      ctx.strokeStyle = '#1a73e8';
      ctx.lineWidth = 2;
      ctx.setLineDash([3, 3]);
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    if (s.peak_step >= 0) {
      const x = u.valToPos(s.peak_step, 'x', true);
      const y = u.valToPos(s.peak_bytes, 'y', true);
      if (x >= left && x <= left + width) {
        ctx.fillStyle = 'rgba(251,188,4,0.25)';
        ctx.fillRect(x - 3, top, 6, height);
        ctx.strokeStyle = '#f29900';
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
        ctx.fillStyle = '#f29900';
        ctx.beginPath();
        ctx.arc(x, y, 4 * devicePixelRatio, 0, 2 * Math.PI);
        ctx.fill();
        ctx.fillStyle = '#202124';
        ctx.font = `bold ${11 * devicePixelRatio}px sans-serif`;
        const text = `peak ${formatBytes(s.peak_bytes)} at ${s.peak_step}`;
        const tw = ctx.measureText(text).width;
        const tx = x + tw + 8 > left + width ? x - tw - 8 : x + 8;
        const ty = Math.max(top + 14 * devicePixelRatio, y - 8);
        ctx.fillStyle = 'rgba(255,255,255,0.85)'; // legible over the curve
        ctx.fillRect(tx - 3, ty - 12 * devicePixelRatio, tw + 6, 16 * devicePixelRatio);
        ctx.fillStyle = '#202124';
        ctx.fillText(text, tx, ty);
      }
    }
    ctx.restore();
  }

  // Training-step boundaries and annotations as faint lines with their names, when at most
  // MAX_MARKERS are in view (zoom in to see them on a long run). Markers at the same step
  // share one line and one label ("end of step 1 · step 2"). The labels (this.markerTexts)
  // and those drawn without overlapping (this.labels) are kept for tests.
  drawMarkers(u, ctx) {
    const MAX_MARKERS = 40;
    const [from, to] = this.range || [0, 0];
    const visible = (this.markers || []).filter((m) => m.step >= from && m.step < to);
    this.labels = [];
    this.markerTexts = [];
    if (!visible.length || visible.length > MAX_MARKERS) return;
    const atStep = new Map();
    for (const m of visible) {
      const text = markerLabel(m);
      if (!atStep.has(m.step)) atStep.set(m.step, []);
      if (text) atStep.get(m.step).push(text);
    }
    this.markerTexts = [...atStep].map(([step, texts]) => ({ step, text: texts.join(' · ') }));
    const { top, height } = u.bbox;
    ctx.strokeStyle = 'rgba(95,99,104,0.35)';
    ctx.fillStyle = '#5f6368';
    ctx.lineWidth = 1;
    ctx.font = `${10 * devicePixelRatio}px sans-serif`;
    let labelEnd = -Infinity; // labels that would overlap the previous one are left out
    for (const [step, texts] of atStep) {
      const x = Math.round(u.valToPos(step, 'x', true)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
      const text = texts.join(' · ');
      if (text && x + 3 > labelEnd) {
        ctx.fillText(text, x + 3, top + height - 4 * devicePixelRatio);
        labelEnd = x + 3 + ctx.measureText(text).width + 6;
        this.labels.push({ step, text });
      }
    }
  }

  destroy() {
    window.removeEventListener('resize', this.onResize);
    if (this.plot) this.plot.destroy();
    this.plot = null;
  }
}
