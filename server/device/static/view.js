// The status card and the drawings table: the trainer's state in words a phone owner reads.

const PHASES = {
  starting: 'Starting…', needs_code: 'Not enrolled', code: 'Join code refused', enrolling: 'Joining',
  no_data: 'Waiting for your drawings', asking: 'Training', computing: 'Training', pushing: 'Training',
  trained: 'Training', waiting: 'Waiting', offline: 'Offline', error: 'Problem',
  dropped: 'Task dropped', dp: 'Not training', finished: 'Training finished', refused: 'Refused',
  paused: 'Paused on this device', broken: 'Cannot train here',
};
// the coordinator's reasons for a 503/429 (docs/protocol.md)
const REASONS = {
  paused: 'the operator paused training', small_batch: 'the coordinator wants larger batches',
  too_similar: 'the coordinator has enough of these labels for now', no_model: 'no model is training',
  storage_unavailable: 'the coordinator cannot reach its database', rate_limited: 'asking too often',
  privacy_budget_exhausted: 'privacy budget spent', dp_unsupported: 'the model has no DP graph',
  round_ahead: 'ahead of the slower devices',
};

const $ = (selector) => document.querySelector(selector);

function field(name, text) {
  const element = document.querySelector(`[data-field="${name}"]`);
  if (element && element.textContent !== text) element.textContent = text;
}

function seconds(ms) {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

export function renderStatus(status, { running, battery, samples }) {
  // stopped by the user (a task under way still finishes): "paused", unless it stopped for a reason of its own
  const phase = running || ['finished', 'refused', 'broken'].includes(status.phase) ? status.phase : 'paused';
  const reason = status.phase === 'waiting' && status.reason ? `: ${REASONS[status.reason] || status.reason}` : '';
  field('phase', (PHASES[phase] || phase) + reason);
  document.body.dataset.phase = phase;
  let detail = status.detail || '';
  if (status.retryAt && ['waiting', 'offline', 'error'].includes(status.phase)) {
    const left = Math.max(0, (status.retryAt - Date.now()) / 1000);
    if (detail && !/[.!?:]$/.test(detail)) detail += '.';
    detail += ` Next try in ${left < 10 ? left.toFixed(1) : Math.round(left)} s.`;
  }
  field('detail', detail);
  field('device', status.deviceId ? `enrolled: ${status.deviceId}` : 'not enrolled');
  field('model', status.modelId ? `${status.modelName || status.modelId}, version ${status.version ?? '–'}` : '–');
  field('tasks', String(status.tasks) + (status.dropped ? ` (${status.dropped} dropped)` : ''));
  field('last', status.lastComputeMs === null ? '–'
    : `${seconds(status.lastComputeMs)} on ${status.lastBatch} drawings, loss ${status.lastLoss.toFixed(3)}`
      + (status.lastEnergy === null ? ', energy not measurable' : `, ${status.lastEnergy}% battery`));
  field('battery', battery.describe());
  field('samples', String(samples));
  $('#join').hidden = Boolean(status.deviceId) && status.phase !== 'code' && status.phase !== 'needs_code';
  $('#toggle').textContent = running ? 'Pause' : (status.phase === 'finished' ? 'Check again' : 'Train');
}

export function renderCounts(counts) {
  const body = $('#counts');
  const total = counts.reduce((a, b) => a + b, 0);
  const cells = counts.map((n, digit) => `<td data-digit="${digit}">${n}</td>`).join('');
  const html = `<tr>${counts.map((_, d) => `<th scope="col">${d}</th>`).join('')}</tr><tr>${cells}</tr>`;
  if (body.innerHTML !== html) body.innerHTML = html;
  field('samples', String(total));
}

export function renderGuess(probs) {
  const best = probs.indexOf(Math.max(...probs));
  field('guess', `It looks like a ${best} (${Math.round(probs[best] * 100)}%).`);
  const bars = $('#bars');
  bars.replaceChildren(...probs.map((p, digit) => {
    const row = document.createElement('div');
    row.className = digit === best ? 'bar best' : 'bar';
    const [label, fill, value] = ['span', 'span', 'span'].map((tag) => document.createElement(tag));
    label.textContent = String(digit);
    fill.className = 'fill';
    fill.style.setProperty('--p', `${(p * 100).toFixed(1)}%`); // CSSOM: allowed by the page's CSP
    value.textContent = `${(p * 100).toFixed(1)}%`;
    row.append(label, fill, value);
    return row;
  }));
}

export function say(name, text) {
  field(name, text);
}
