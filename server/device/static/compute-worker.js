// The Web Worker that runs ONNX Runtime Web (wasm, one thread): a task's loss and gradient with the
// model's training graph, as client/_onnx_session.py's GradientSession computes them, and the inference
// graph's probabilities for "Try the model". Never on the page's thread: drawing stays smooth.

import * as ort from './vendor/ort.wasm.min.mjs';

ort.env.wasm.numThreads = 1; // no SharedArrayBuffer, so no cross-origin isolation needed
ort.env.wasm.proxy = false;
ort.env.wasm.wasmPaths = new URL('./vendor/', import.meta.url).href;

const sessions = new Map(); // key (model id + graph) → InferenceSession

async function load({ key, graph }) {
  if (!sessions.has(key)) {
    for (const [old, session] of sessions) { // one model trains at a time: drop another model's sessions
      if (old.split('|')[0] !== key.split('|')[0]) {
        sessions.delete(old);
        session.release?.();
      }
    }
    sessions.set(key, await ort.InferenceSession.create(new Uint8Array(graph), { executionProviders: ['wasm'] }));
  }
  return [{ inputs: sessions.get(key).inputNames }];
}

function session(key) {
  const found = sessions.get(key);
  if (!found) throw new Error(`graph ${key} is not loaded`);
  return found;
}

/** Each parameter the graph takes, as a view of the flat buffer shaped by the manifest, and x. */
function feeds(graph, manifest, params, x, n) {
  const inputs = new Set(graph.inputNames);
  const out = {};
  for (const p of manifest.params) {
    if (inputs.has(p.name)) out[p.name] = new ort.Tensor('float32', params.subarray(p.offset, p.offset + p.size), p.shape);
  }
  out[manifest.x_name || 'x'] = new ort.Tensor('float32', x, [n, ...manifest.input_shape]);
  return out;
}

/** Mean loss over the batch and the flat float32 gradient, in manifest order; the time it took. */
async function gradient({ key, manifest, params, x, y }) {
  const started = performance.now();
  const graph = session(key);
  const n = y.length;
  const input = feeds(graph, manifest, params, x, n);
  input[manifest.y_name || 'y'] = new ort.Tensor('int64', BigInt64Array.from(y, (v) => BigInt(v)), [n]);
  const grads = manifest.grad_names?.length ? manifest.grad_names : graph.outputNames.slice(1);
  if (grads.length !== manifest.params.length) {
    throw new Error(`train graph has ${grads.length} gradient outputs for ${manifest.params.length} params`);
  }
  const lossName = manifest.loss_name || 'loss';
  const result = await graph.run(input, [lossName, ...grads]);
  const flat = new Float32Array(manifest.num_params);
  manifest.params.forEach((p, i) => {
    const data = result[grads[i]].data;
    if (data.length !== p.size) throw new Error(`gradient of ${p.name} has ${data.length} values, expected ${p.size}`);
    flat.set(data, p.offset);
  });
  const loss = Number(result[lossName].data[0]);
  const computeMs = performance.now() - started;
  return [{ loss, gradient: flat, computeMs }, [flat.buffer]];
}

/** Softmax of the inference graph's logits for one or more images. */
async function predict({ key, manifest, params, x }) {
  const graph = session(key);
  const n = x.length / manifest.input_shape.reduce((a, b) => a * b, 1);
  const result = await graph.run(feeds(graph, manifest, params, x, n), [manifest.logits_name || 'logits']);
  const logits = result[manifest.logits_name || 'logits'].data;
  const classes = manifest.num_classes;
  const probs = new Float32Array(logits.length);
  for (let row = 0; row < n; row++) {
    const slice = logits.subarray(row * classes, (row + 1) * classes);
    const top = Math.max(...slice);
    const exp = Array.from(slice, (v) => Math.exp(v - top));
    const total = exp.reduce((a, b) => a + b, 0);
    exp.forEach((v, c) => { probs[row * classes + c] = v / total; });
  }
  return [{ probs }, [probs.buffer]];
}

const OPS = { load, gradient, predict };

self.onmessage = async ({ data }) => {
  const { id, op, args } = data;
  try {
    const [result, transfer = []] = await OPS[op](args);
    self.postMessage({ id, result }, transfer);
  } catch (exc) {
    self.postMessage({ id, error: String(exc?.message || exc) });
  }
};

self.postMessage({ ready: true, version: ort.env.versions?.web || null });
