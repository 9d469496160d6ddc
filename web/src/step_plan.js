// step_plan.js — the "Step plan" panel: mode learn's plan in the profile (/api/step_plan, the
// object `hbm report --json` gives under step_plan): the step found, the share of each planned
// step served from the plan (a bar a step), the memory the plan saved. Hidden when the
// profile holds no plan (any mode but learn).
import { formatBytes, formatCount } from './format.js';

const STEPS_SHOWN = 64; // the first steps one by one; the totals cover them all

function percent(x) {
  return `${(100 * x).toFixed(2)}%`;
}

function stepRow(s, i) {
  const reserved = s.reserved_bytes == null ? '' : `, ${formatBytes(s.reserved_bytes)} reserved at most`;
  return `<div class="plan-step" title="step ${i + 1}: ${formatCount(s.served)} of ${formatCount(s.operations)} operations from the plan, ${formatCount(s.fell_back)} fell back${reserved}">
    <span class="plan-step-label">step ${i + 1}</span>
    <span class="plan-step-bar"><span style="width:${(100 * s.served_fraction).toFixed(1)}%"></span></span>
    <span class="plan-step-value">${percent(s.served_fraction)}${reserved}</span></div>`;
}

export function renderStepPlan(panel, body, plan) {
  panel.hidden = !plan;
  if (!plan) {
    body.innerHTML = '';
    return;
  }
  const planned = plan.planned_reserved_bytes == null ? 'not recorded' : `${formatBytes(plan.planned_reserved_bytes)} at most`;
  const steps = plan.steps.slice(0, STEPS_SHOWN).map(stepRow).join('');
  const more = plan.steps.length > STEPS_SHOWN ? `<p class="muted">${formatCount(plan.steps.length - STEPS_SHOWN)} more steps (hbm report --json lists them all).</p>` : '';
  body.innerHTML = `<dl class="plan-numbers">
      <dt>Step found</dt><dd>${formatCount(plan.step_operations)} operations (${formatCount(plan.step_allocations)} allocations), from the stream; ${formatCount(plan.plans)} plan${plan.plans === 1 ? '' : 's'} made, ${formatCount(plan.retired)} retired</dd>
      <dt>Plan</dt><dd>${formatBytes(plan.plan_bytes)} for a step whose blocks peak at ${formatBytes(plan.bound_bytes)}</dd>
      <dt>Served</dt><dd>${formatCount(plan.served_operations)} operations of ${formatCount(plan.steps.length)} planned steps from the plan (${percent(plan.served_fraction)})</dd>
      <dt>Memory saved</dt><dd>${formatBytes(plan.saved_bytes)}: the step before the plan reserved ${formatBytes(plan.first_step_reserved_bytes)}, the planned steps ${planned}</dd>
    </dl>
    <div class="plan-steps">${steps}</div>${more}`;
}
