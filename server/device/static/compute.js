// The page's side of the compute worker: one message per call, answered by id; each model's graphs are
// sent to the worker once. If ONNX Runtime Web cannot be loaded, every call fails with a plain sentence.

export class Compute {
  constructor() {
    this.calls = new Map();
    this.next = 1;
    this.loaded = new Set();
    this.busy = 0; // calls in flight (the frame-gap probe records whether a computation was running)
    this.failure = null;
    this.ready = new Promise((resolve) => { this.markReady = resolve; });
    this.spawn();
  }

  spawn() {
    this.worker = new Worker(new URL('./compute-worker.js', import.meta.url), { type: 'module' });
    this.worker.onmessage = ({ data }) => this.answer(data);
    this.worker.onerror = (event) => {
      event.preventDefault?.();
      this.fail(`ONNX Runtime Web could not be loaded in the compute worker (${event.message || 'a missing or '
        + 'blocked file'}): the server may need \`make vendor\``);
    };
  }

  /** A fresh worker after ONNX Runtime failed to start its backend (a wasm download cut short, say): the
   * runtime remembers such a failure, so only a new worker tries again. */
  restart() {
    this.worker.terminate();
    for (const call of this.calls.values()) call.reject(new Error('the compute worker was restarted'));
    this.calls.clear();
    this.loaded.clear();
    this.busy = 0;
    this.spawn();
  }

  answer(data) {
    if (data.ready) {
      this.version = data.version;
      this.markReady(true);
      return;
    }
    const call = this.calls.get(data.id);
    if (!call) return;
    this.calls.delete(data.id);
    this.busy -= 1;
    if (data.error) {
      call.reject(new Error(data.error));
      if (/backend/i.test(data.error)) this.restart();
    } else {
      call.resolve(data.result);
    }
  }

  fail(message) {
    this.failure = message;
    this.markReady(false);
    for (const call of this.calls.values()) call.reject(new Error(message));
    this.calls.clear();
    this.busy = 0;
  }

  call(op, args, transfer = []) {
    if (this.failure) return Promise.reject(new Error(this.failure));
    const id = this.next++;
    this.busy += 1;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject });
      this.worker.postMessage({ id, op, args }, transfer);
    });
  }

  /** Send a graph (ArrayBuffer, copied) to the worker once per model and graph name. */
  async ensure(modelId, name, fetchGraph) {
    const key = `${modelId}|${name}`;
    if (!this.loaded.has(key)) {
      const graph = await fetchGraph();
      await this.call('load', { key, graph });
      for (const old of [...this.loaded]) if (!old.startsWith(`${modelId}|`)) this.loaded.delete(old);
      this.loaded.add(key);
    }
    return key;
  }

  /** {loss, gradient: Float32Array, computeMs} of the training graph on (x, y) at `params`. */
  async gradient({ modelId, manifest, graph, params, x, y }) {
    const key = await this.ensure(modelId, 'train', graph);
    return this.call('gradient', { key, manifest, params, x, y }, [x.buffer]); // the batch moves, uncopied
  }

  /** {probs: Float32Array} of the inference graph on images x at `params`. */
  async predict({ modelId, manifest, graph, params, x }) {
    const key = await this.ensure(modelId, 'infer', graph);
    return this.call('predict', { key, manifest, params, x });
  }
}
