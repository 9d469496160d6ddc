// peak_table.js — the table of the buffers live at the peak, largest first, searched and paged
// by the server (/api/buffers_at_peak?order=size&q=...&offset=...&limit=...): a peak of
// millions of buffers is never loaded into the page, one page of rows at a time is.
import { formatBytes, formatCount, escapeHtml } from './format.js';
import { api } from './api.js';

const TABLE_ROWS = 200;

export class PeakTable {
  // els: {wrap, filter, table, count}; args(extra) -> the request's arguments; onPick(item)
  constructor(els, args, onPick) {
    this.els = els;
    this.args = args;
    this.onPick = onPick;
    this.offset = 0;
    this.seq = 0;
    els.filter.addEventListener('input', () => {
      this.offset = 0;
      this.clear();
      this.render();
    });
  }

  // A new profile or memory type: its first page.
  reset() {
    this.offset = 0;
    this.render();
  }

  clear() {
    const body = this.els.table.querySelector('tbody');
    if (body) body.innerHTML = '';
  }

  // Asks for the current page (a newer request supersedes an older one still on its way).
  async render() {
    if (!this.els.wrap.open) return;
    const seq = ++this.seq;
    const q = this.els.filter.value.trim();
    let answer;
    try {
      answer = await api('buffers_at_peak', this.args({ order: 'size', q, offset: this.offset, limit: TABLE_ROWS }));
    } catch (err) {
      if (seq === this.seq) this.els.count.textContent = err.message;
      return;
    }
    if (seq !== this.seq) return;
    this.show(answer, q);
  }

  show(answer, q) {
    const items = answer.buffers;
    const first = answer.offset;
    const rows = items.map((b, i) => `<tr data-i="${i}">
      <td class="num">${first + i + 1}</td><td class="opname">${escapeHtml(b.op || '(untagged)')}</td>
      <td><code>${escapeHtml(b.shape || '')}</code></td><td class="num">${formatBytes(b.size)}</td>
      <td class="num">${formatBytes(b.unpadded)}</td><td class="num">${formatBytes(b.size - b.unpadded)}</td>
      <td>${escapeHtml(b.category)}</td><td class="group">${escapeHtml(b.group || '')}</td>
      <td class="source" title="${escapeHtml(b.source || '')}">${escapeHtml((b.source || '').split('/').pop())}</td></tr>`);
    this.els.table.innerHTML = `<thead><tr><th>#</th><th>op</th><th>shape</th><th>size</th><th>unpadded</th>
      <th>padding</th><th>category</th><th>group</th><th>source</th></tr></thead><tbody>${rows.join('')}</tbody>`;
    const n = answer.count;
    const what = `${formatCount(n)} buffer${n === 1 ? '' : 's'}${q ? ` matching "${escapeHtml(q)}"` : ' live at the peak'}`;
    const range = n > items.length ? `, ${formatCount(first + 1)}–${formatCount(first + items.length)} shown` : '';
    const prev = first > 0 ? ' <button type="button" data-page="-1">previous</button>' : '';
    const next = first + items.length < n ? ' <button type="button" data-page="1">next</button>' : '';
    this.els.count.innerHTML = `${what}${range}${prev}${next}`;
    this.els.count.querySelectorAll('button').forEach((button) => button.addEventListener('click', () => {
      this.offset = Math.max(0, first + Number(button.dataset.page) * TABLE_ROWS);
      this.render();
    }));
    this.els.table.querySelectorAll('tbody tr').forEach((tr) => tr.addEventListener('click', () => {
      this.onPick(items[Number(tr.dataset.i)]);
    }));
  }
}
