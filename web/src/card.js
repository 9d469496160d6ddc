// card.js — the buffer card (XProf's hover card, and more): op, shape, size, unpadded size,
// padding and expansion, allocation type, group, source and source stack (XProf's "Source
// Stack": file:line:column per frame, innermost first), opcode, XLA label (runtime: the
// call stack, e.g. a PyTorch snapshot's frames) and live range.
// Each value carries data-field so tests (and users' scripts) can read it.
import { formatBytes, formatTime, escapeHtml, categoryColor, CATEGORY_LABELS } from './format.js';

function row(field, label, valueHtml) {
  if (valueHtml == null || valueHtml === '') return '';
  return `<tr><th>${label}</th><td data-field="${field}">${valueHtml}</td></tr>`;
}

function rangeText(card, kind) {
  const runtime = kind === 'runtime';
  const unit = runtime ? 'event' : 'step';
  const end = card.live_out ? `${card.end} (live out)` : card.end;
  let text = `${unit} ${card.start} → ${end} (${card.end - card.start} ${unit}s)`;
  if (card.indefinite) text += ', whole program';
  if (runtime && card.start_time_ns != null) {
    text += `<br>${formatTime(card.start_time_ns)} → ${card.end_time_ns != null ? formatTime(card.end_time_ns) : 'end'}`;
  }
  if (!runtime && (card.start_label || card.end_label)) {
    text += `<br><span class="muted">${escapeHtml(card.start_label || '?')} → ${escapeHtml(card.end_label || 'end')}</span>`;
  }
  if (card.bytes_end != null && card.bytes_end !== card.end) { // a revived buffer (docs/viewer.md)
    text += `<br><span class="muted">its bytes stay to ${unit} ${card.bytes_end}, held by a later sharer</span>`;
  }
  return text;
}

// card: the JSON of /api/buffer (or a bar's summary while it loads).
export function renderCard(el, card, kind, pinned) {
  if (!card) {
    el.innerHTML = '<p class="muted">Hover over or click a bar to see its buffer.</p>';
    delete el.dataset.id;
    return;
  }
  if (card.merged) {
    el.innerHTML = `<h3>${card.count} small buffers</h3><table>${
      row('size', 'Size', formatBytes(card.size))}${
      row('unpadded_size', 'Unpadded size', formatBytes(card.unpadded))}</table>
      <p class="muted">Buffers under 16 KiB merged into one bar; untick "merge" to see each.</p>`;
    el.dataset.id = '-1';
    return;
  }
  const padding = card.padding ?? Math.max(0, card.size - (card.unpadded_size ?? card.unpadded));
  const unpadded = card.unpadded_size ?? card.unpadded;
  const expansion = card.expansion ?? (unpadded ? card.size / unpadded : null);
  const cat = card.category || 'unknown';
  el.dataset.id = String(card.id);
  el.innerHTML = `
    <h3><span class="swatch" style="background:${categoryColor(cat)}"></span><span data-field="op">${escapeHtml(card.op || '(untagged)')}</span>${pinned ? ' <span class="pin" title="click the bar again or press Esc to unpin">(pinned)</span>' : ''}</h3>
    <table>
      ${row('shape', 'Shape', card.shape ? `<code>${escapeHtml(card.shape)}</code>` : '')}
      ${row('size', 'Size', `${formatBytes(card.size)} <span class="muted">(${Number(card.size).toLocaleString('en-US')} B)</span>`)}
      ${row('unpadded_size', 'Unpadded size', formatBytes(unpadded))}
      ${row('padding', 'Extra memory due to padding', padding ? `<b class="pad">${formatBytes(padding)}</b>` : '0 B')}
      ${row('expansion', 'Expansion', expansion ? `${expansion.toFixed(expansion >= 10 ? 1 : 2)}×` : '')}
      ${row('category', 'Allocation type', escapeHtml(CATEGORY_LABELS[cat] || cat))}
      ${row('group', 'Group', escapeHtml(card.group || ''))}
      ${row('source', 'Source', card.source ? `<code>${escapeHtml(card.source)}</code>` : '')}
      ${row('stack', 'Source stack', card.stack ? `<code class="label">${escapeHtml(card.stack)}</code>` : '')}
      ${row('opcode', 'Opcode', escapeHtml(card.opcode || ''))}
      ${row('label', kind === 'runtime' ? 'Stack' : 'XLA label', card.label ? `<code class="label">${escapeHtml(card.label)}</code>` : '')}
      ${card.start != null ? row('range', 'Live range', rangeText(card, kind)) : ''}
      ${card.address ? row('address', kind === 'runtime' ? 'Address' : 'Offset', `<code>${card.address}</code> (+${formatBytes(card.offset)})`) : ''}
    </table>`;
}
