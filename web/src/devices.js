// devices.js — many devices, one view: when a run holds several hosts, devices or ranks (several
// .xplane.pb, a folder of per-rank snapshots, an SPMD program on several devices), a "Device"
// selector like XProf's host selector (each device opens its profile and memory space) and the
// summary panel: peak per device, the largest named, median, smallest, spread, and what the
// largest holds beyond the median (from /api/devices, the summary `hbm report RUN` prints first).
import { formatBytes, formatDelta, formatCount, escapeHtml } from './format.js';
import { tableHtml } from './compare.js';

// The selector's value for a device: its profile and memory space.
export function deviceValue(d) {
  return JSON.stringify([d.profile, d.space_index]);
}

export function fillDeviceSelect(wrap, select, devices) {
  const many = devices && devices.count >= 2;
  wrap.hidden = !many;
  if (!many) {
    select.innerHTML = '';
    return;
  }
  select.innerHTML = devices.per_device.map((d) => `<option value="${escapeHtml(deviceValue(d))}">${escapeHtml(d.label)} — ${formatBytes(d.peak_bytes)}${d === devices.largest || d.label === devices.largest.label ? ' (largest)' : ''}</option>`).join('');
}

// The option for the profile and space shown, if a device is them.
export function selectShownDevice(select, profile, space) {
  const value = JSON.stringify([profile, space]);
  if ([...select.options].some((o) => o.value === value)) select.value = value;
}

function roleRow(role, d) {
  return `<tr><th>${role}</th><td class="num">${formatBytes(d.peak_bytes)}</td><td>${escapeHtml(d.label)}${d.source ? ` <span class="muted">(${d.source}: ${escapeHtml(d.source === 'allocator' ? d.space : d.space_device)})</span>` : ''}</td></tr>`;
}

export function renderDevices(panel, devices, onPick) {
  const many = devices && devices.count >= 2;
  panel.hidden = !many;
  if (!many) return;
  const top = devices.largest.peak_bytes || 1;
  const over = devices.largest.peak_bytes - devices.median.peak_bytes;
  const bars = devices.per_device.map((d) => `<div class="device-bar" data-value="${escapeHtml(deviceValue(d))}" title="open ${escapeHtml(d.label)}">
      <span class="device-label">${escapeHtml(d.label)}</span>
      <span class="device-track"><span class="device-fill${d.label === devices.largest.label ? ' largest' : ''}" style="width:${(100 * d.peak_bytes / top).toFixed(1)}%"></span></span>
      <span class="num">${formatBytes(d.peak_bytes)}</span></div>`).join('');
  const diff = devices.difference;
  panel.querySelector('#devices-body').innerHTML = `
    <table class="compare" id="devices-roles"><tbody>${roleRow('Largest', devices.largest)}${roleRow('Median', devices.median)}${roleRow('Smallest', devices.smallest)}
    <tr><th>Spread</th><td class="num">${formatBytes(devices.spread_bytes)}</td><td class="muted">largest − smallest; the largest is ${formatDelta(over)} over the median</td></tr></tbody></table>
    <h3>Peak per device <span class="muted">(${formatCount(devices.count)} devices; click one to open it)</span></h3>
    <div id="devices-bars">${bars}</div>
    ${diff ? `<h3>What the largest holds at its peak beyond the median's <span class="muted">(${formatDelta(diff.change)}; the buffers at the two peaks, paired as <code>hbm diff</code> pairs them)</span></h3>${tableHtml(diff, 'op')}`
    : '<p class="muted">Every device peaks at the same bytes: nothing sets the largest apart.</p>'}`;
  panel.querySelectorAll('.device-bar').forEach((el) => el.addEventListener('click', () => onPick(el.dataset.value)));
}
