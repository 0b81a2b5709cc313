// The training loop (client/_worker.py's, in the browser): enroll, ask for a task, pull the model and the
// granted version, compute the gradient on a batch of the page's drawings in the worker, push it; obey the
// coordinator's waits (503/429 Retry-After), drop a task it no longer wants (410), stop when training is
// finished, enroll again on 401 with the install secret, back off while the network is away.

import { Api, FleetError } from './protocol.js';

const BACKOFF_INITIAL = 1;
const BACKOFF_MAX = 30;
const MAX_WAIT = 600;

function backoff(attempt) {
  const delay = Math.min(BACKOFF_MAX, BACKOFF_INITIAL * 2 ** Math.min(attempt - 1, 10));
  return delay / 2 + Math.random() * (delay / 2); // uniform in [d/2, d], as the Python worker
}

export class Trainer extends EventTarget {
  constructor({ store, compute, battery, deviceModel, features }) {
    super();
    Object.assign(this, { store, compute, battery, deviceModel, features });
    this.api = new Api('');
    this.models = new Map(); // model id → {manifest, train: ArrayBuffer}: fetched once per model
    this.active = null; // the active model's info (GET /v1/models/active)
    this.running = false;
    this.errors = 0;
    this.reenrolled = false;
    this.wakeUp = null;
    this.status = { phase: 'starting', detail: '', retryAt: null, reason: null, deviceId: null, tasks: 0,
      modelId: null, modelName: null, version: null, lastComputeMs: null, lastBatch: null, lastLoss: null,
      lastEnergy: null, dropped: 0, firstTaskMs: null };
    store.addEventListener('samples', () => this.wake());
    addEventListener('online', () => this.wake());
  }

  async init() {
    const s = this.store;
    this.api.token = await s.get('token');
    this.enrollmentKey = await s.get('enrollment_key');
    this.update({ deviceId: await s.get('device_id'), tasks: await s.get('tasks', 0) });
    return this;
  }

  update(patch) {
    Object.assign(this.status, patch);
    this.dispatchEvent(new Event('status'));
  }

  /** A join code (an enrollment key) typed by the user or read from the page's #join= fragment. */
  async setCode(code) {
    this.enrollmentKey = code.trim();
    await this.store.set('enrollment_key', this.enrollmentKey);
    this.reenrolled = false;
    this.wake();
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.store.set('paused', false);
    this.loop();
  }

  stop(phase = 'paused', detail = 'Training is paused on this device.') {
    this.running = false;
    this.update({ phase, detail, retryAt: null });
    this.wake();
  }

  pause() {
    this.store.set('paused', true);
    this.stop();
  }

  wake() {
    this.wakeUp?.();
  }

  sleep(seconds) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, Math.max(0, seconds) * 1000);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeUp = done;
    });
  }

  async wait(phase, detail, seconds, reason = null) {
    this.update({ phase, detail, reason, retryAt: Date.now() + seconds * 1000 });
    await this.sleep(seconds);
  }

  async loop() {
    if (this.looping) return;
    this.looping = true;
    try {
      while (this.running) {
        try {
          await this.step();
        } catch (exc) {
          const delay = this.onError(exc);
          if (delay !== null && this.running) await this.sleep(delay);
        }
      }
    } finally {
      this.looping = false;
    }
  }

  async enroll() {
    this.update({ phase: 'enrolling', detail: 'Joining the coordinator…', retryAt: null });
    try {
      const answer = await this.api.enroll({
        enrollmentKey: this.enrollmentKey, deviceModel: this.deviceModel,
        installSecret: await this.store.installSecret(),
      });
      await this.store.set('token', answer.token);
      await this.store.set('device_id', answer.device_id);
      this.update({ deviceId: answer.device_id });
    } catch (exc) {
      if (exc.kind === 'auth') {
        this.enrollmentKey = null;
        await this.store.set('enrollment_key', null);
        const why = exc.reason === 'enrollment_code_expired' ? 'This join code has expired'
          : 'This join code is not valid (revoked, or mistyped)';
        throw new FleetError(`${why}: ask the operator for a new one.`, { kind: 'code', reason: exc.reason });
      }
      throw exc;
    }
  }

  /** The manifest and training graph of a model, fetched once. */
  async modelFiles(modelId, grant = {}) {
    if (!this.models.has(modelId)) {
      const manifest = await this.api.json(grant.manifest_url || `/v1/models/${modelId}/manifest`);
      const train = await this.api.bytes(grant.train_graph_url || `/v1/models/${modelId}/graphs/train.onnx`);
      this.models.clear(); // one model trains at a time
      this.models.set(modelId, { manifest, train });
    }
    return this.models.get(modelId);
  }

  async step() {
    if (!this.api.token) {
      if (!this.enrollmentKey) {
        this.update({ phase: 'needs_code', detail: this.status.phase === 'code' ? this.status.detail
          : 'Enter a join code (or open the join link) to take part.', retryAt: null });
        await this.sleep(3600);
        return;
      }
      await this.enroll();
    }
    if (!this.store.samples.length) {
      this.update({ phase: 'no_data', detail: 'Draw a digit and tap its label: training starts with your first drawing.', retryAt: null });
      await this.sleep(3600);
      return;
    }
    if (!this.active) {
      this.update({ phase: 'asking', detail: 'Looking for the model in training…', retryAt: null });
      this.active = await this.api.activeModel();
      this.update({ modelId: this.active.model_id, modelName: this.active.name });
    }
    if (this.active.dp) {
      const model = this.active;
      this.active = null;
      await this.wait('dp', `The coordinator trains ${model.name} with differential privacy (DP-SGD); this browser `
        + 'device does not implement DP-SGD yet, so it asks for no tasks.', 60);
      return;
    }
    await this.task(this.active.num_classes);
  }

  async task(classes) {
    const counts = this.store.labelCounts(classes);
    const examples = this.store.samples.length;
    if (counts.reduce((a, b) => a + b, 0) !== examples) {
      throw new FleetError(`some drawings have labels the model does not know (it has ${classes} classes)`);
    }
    this.update({ phase: 'asking', detail: 'Asking for a task…', retryAt: null });
    const grant = await this.api.requestTask({
      deviceModel: this.deviceModel, features: this.features(), labelCounts: counts, localExamples: examples,
    });
    if (grant.dp) { // terms (DP-SGD, a local SGD round) this page does not implement: given back, as the client does
      const detail = `the browser device cannot run ${grant.dp.mechanism || 'these'} terms`;
      await this.api.decline(grant.task_id, 'terms_unrunnable', detail).catch(() => null); // its lease lapses anyway
      throw new FleetError(`Declined a task: ${detail}.`, { kind: 'declined' });
    }
    if (grant.model_id !== this.active?.model_id) this.active = null; // another model now: look again next time
    const { manifest, train } = await this.modelFiles(grant.model_id, grant);
    const params = await this.api.params(
      grant.params_url || `/v1/models/${grant.model_id}/versions/${grant.version}/params`, manifest.num_params);
    const { x, y } = this.store.batch(grant.batch_size);
    this.update({ phase: 'computing', detail: `Computing a gradient on ${y.length} of your drawings…`,
      modelId: grant.model_id, version: grant.version, retryAt: null });
    const before = this.battery.read();
    const out = await this.compute.gradient({ modelId: grant.model_id, manifest, graph: async () => train, params, x, y });
    const energy = this.battery.drop(before, this.battery.read());
    if (!Number.isFinite(out.loss) || !out.gradient.every(Number.isFinite)) {
      throw new FleetError(`task ${grant.task_id}: non-finite loss or gradient, not pushed`);
    }
    const batchCounts = new Array(classes).fill(0);
    for (const label of y) batchCounts[label] += 1;
    const meta = { label_counts: batchCounts, loss: out.loss, compute_time_ms: out.computeMs, energy, batch_size: y.length };
    this.update({ phase: 'pushing', detail: 'Sending the gradient…' });
    const outcome = await this.push(grant, meta, out.gradient);
    this.errors = 0;
    this.reenrolled = false;
    const tasks = this.status.tasks + 1;
    await this.store.set('tasks', tasks);
    if (this.status.firstTaskMs === null) this.update({ firstTaskMs: performance.now() }); // since the page opened
    this.update({ phase: 'trained', detail: `Task done: the model is at version ${outcome.version}.`, tasks,
      version: outcome.version, lastComputeMs: out.computeMs, lastBatch: y.length, lastLoss: out.loss, lastEnergy: energy });
  }

  /** Push until it is answered: the same body again after a network error or a 503 (a retry of an answered
   * push is told `duplicate`); a task the coordinator no longer wants (410, 404) is dropped. */
  async push(grant, meta, gradient) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.api.push(grant.task_id, meta, gradient);
      } catch (exc) {
        if (exc.status === 410 || exc.status === 404) { // lease over, model finished or replaced, grant lost
          throw new FleetError(`task dropped (${exc.message}); asking for another`, { kind: 'dropped', status: exc.status });
        }
        if (exc.kind === 'auth' && attempt === 1) {
          this.api.token = null;
          await this.enroll(); // the task belongs to the device id, which enrolling again keeps
          continue;
        }
        if (exc.kind !== 'transport' && exc.kind !== 'rejected') throw exc;
        if (grant.lease_deadline && Date.now() / 1000 >= grant.lease_deadline) {
          throw new FleetError('the task\'s lease ended before its push got through; asking for another', { kind: 'dropped' });
        }
        const delay = exc.kind === 'rejected' ? exc.retryAfter : backoff(attempt);
        const offline = exc.reason === 'offline';
        const phase = offline ? 'offline' : exc.kind === 'rejected' ? 'waiting' : 'error';
        await this.wait(phase, `Push not through (${offline ? 'offline' : exc.message}): sending it again.`,
          delay, exc.kind === 'rejected' ? exc.reason : null);
        if (!this.running) throw new FleetError('stopped while pushing', { kind: 'stopped' });
      }
    }
  }

  /** Seconds to wait before the next step (null: at once). */
  onError(exc) {
    const kind = exc?.kind || 'error';
    if (kind === 'finished') {
      this.stop('finished', `Training is finished: ${exc.message}`);
      return null;
    }
    if (kind === 'refused') {
      this.stop('refused', exc.message);
      return null;
    }
    if (kind === 'stopped') return null;
    if (kind === 'code') {
      this.update({ phase: 'code', detail: exc.message, retryAt: null });
      return null; // step() now waits for a new code
    }
    if (kind === 'dropped') {
      this.update({ phase: 'dropped', detail: exc.message, dropped: this.status.dropped + 1, retryAt: null });
      return null;
    }
    if (kind === 'rejected') {
      if (exc.reason === 'no_model') this.active = null;
      const delay = Math.min(Math.max(exc.retryAfter ?? 5, 0.5), MAX_WAIT);
      this.update({ phase: 'waiting', reason: exc.reason, detail: exc.message, retryAt: Date.now() + delay * 1000 });
      return delay;
    }
    if (kind === 'auth' && !this.reenrolled) {
      this.reenrolled = true;
      this.api.token = null; // enroll again with the install secret: the same device id
      this.update({ phase: 'enrolling', detail: 'The token was refused; joining again.' });
      return null;
    }
    this.errors += 1; // (a declined task counts too: the same terms come back, so the waits grow)
    if (exc?.status === 422 || exc?.status === 404) this.active = null; // the active model may have changed
    const delay = backoff(this.errors);
    const offline = exc?.reason === 'offline';
    this.update({ phase: offline ? 'offline' : 'error', reason: exc?.reason || null,
      detail: offline ? 'Offline: the page tries again when the network is back.' : String(exc?.message || exc),
      retryAt: Date.now() + delay * 1000 });
    return delay;
  }
}
