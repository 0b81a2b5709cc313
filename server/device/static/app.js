// The page: wires the store, the compute worker, the trainer, the drawing pad and the status card, and
// exposes window.fleetDevice (the hook tests and the lab's benchmark drive the page through).

import { Compute } from './compute.js';
import { Battery, deviceModel, features } from './device-info.js';
import { FrameProbe } from './frames.js';
import { strokesToImage } from './image.js';
import { Pad } from './pad.js';
import { PIXELS, Store } from './store.js';
import { Trainer } from './trainer.js';
import { renderCounts, renderGuess, renderStatus, say } from './view.js';

const $ = (selector) => document.querySelector(selector);

function registerServiceWorker() {
  if (!('serviceWorker' in navigator) || !window.isSecureContext) {
    say('offline', 'This page is served over plain http: it trains while open, but working offline and '
      + 'installing it as an app need https.');
    return Promise.resolve(null);
  }
  return navigator.serviceWorker.register('sw.js').then((registration) => {
    say('offline', 'Works offline once loaded; add it to the home screen from the browser menu to install it.');
    return registration;
  }).catch((exc) => {
    say('offline', `Offline use is unavailable: ${exc.message}`);
    return null;
  });
}

/** Bytes of N images, base64 (a test seeds hundreds of MNIST digits in one call). */
function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function wireDrawing({ pad, store, trainer, compute }) {
  const labels = $('#labels');
  for (let digit = 0; digit < 10; digit++) {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = String(digit);
    button.setAttribute('aria-label', `It is a ${digit}`);
    button.addEventListener('click', async () => {
      if (pad.empty) {
        say('kept', 'Draw a digit first.');
        return;
      }
      const count = await store.addSamples([pad.image()], [digit]);
      say('kept', `Kept as a ${digit}: ${count} drawings to train on.`);
      pad.clear();
    });
    labels.append(button);
  }
  $('#undo').addEventListener('click', () => pad.undo());
  $('#clear').addEventListener('click', () => pad.clear());
  $('#forget').addEventListener('click', () => store.removeLast());
  for (const mode of ['teach', 'try']) {
    $(`#mode-${mode}`).addEventListener('click', () => {
      for (const other of ['teach', 'try']) {
        $(`#mode-${other}`).setAttribute('aria-selected', String(other === mode));
        $(`#${other}`).hidden = other !== mode;
      }
    });
  }
  const ask = async () => {
    if (pad.empty) {
      say('guess', 'Draw a digit first.');
      return;
    }
    say('guess', 'Asking the model…');
    try {
      renderGuess(Array.from(await predict({ trainer, compute }, pad.image())));
    } catch (exc) {
      say('guess', `The model could not be run: ${exc.message}`);
    }
  };
  $('#ask').addEventListener('click', ask);
  pad.addEventListener('drawn', () => { if (!$('#try').hidden) ask(); });
}

/** The probabilities the model served now gives an image (the strategy's average of the last versions,
 * when it keeps one, not the newest version's own): the inference graph, params as inputs. */
async function predict({ trainer, compute }, image) {
  const api = trainer.api;
  const info = await api.activeModel();
  const { manifest } = await trainer.modelFiles(info.model_id);
  const params = await api.params(`/v1/models/${info.model_id}/served`, manifest.num_params);
  const graph = () => api.bytes(`/v1/models/${info.model_id}/graphs/infer.onnx`);
  const { probs } = await compute.predict({ modelId: info.model_id, manifest, graph, params, x: Float32Array.from(image) });
  return probs;
}

function hooks({ store, trainer, compute, probe, pad, sw }) {
  return {
    addSamples: (images, labels) => store.addSamples(images, labels),
    addSampleBytes: (base64, labels) => {
      const bytes = fromBase64(base64);
      return store.addSamples(labels.map((_, i) => bytes.subarray(i * PIXELS, (i + 1) * PIXELS)), labels);
    },
    clearSamples: () => store.clearSamples(),
    state: () => ({ ...trainer.status, running: trainer.running, samples: store.samples.length,
      counts: store.labelCounts(), computing: compute.busy > 0, runtime: compute.version || null,
      serviceWorker: Boolean(navigator.serviceWorker?.controller) }),
    frameGaps: () => probe.snapshot(),
    clearFrameGaps: () => probe.clear(),
    imageOf: (strokes) => Array.from(strokesToImage(strokes)),
    padImage: () => Array.from(pad.image()),
    /** The active model's loss and gradient at `params` on (x, y), computed by the page's worker. */
    gradient: async ({ params, x, y }) => {
      const info = await trainer.api.activeModel();
      const { manifest, train } = await trainer.modelFiles(info.model_id);
      const out = await compute.gradient({ modelId: info.model_id, manifest, graph: async () => train,
        params: Float32Array.from(params), x: Float32Array.from(x), y: Int32Array.from(y) });
      return { loss: out.loss, gradient: Array.from(out.gradient), computeMs: out.computeMs };
    },
    predict: async (image) => Array.from(await predict({ trainer, compute }, image)),
    /** Resolves once the trainer is in `phase` (e.g. 'computing': a test cuts the network mid-task). */
    when: (phase) => new Promise((resolve) => {
      const check = () => {
        if (trainer.status.phase !== phase) return;
        trainer.removeEventListener('status', check);
        resolve(true);
      };
      trainer.addEventListener('status', check);
      check();
    }),
    setCode: (code) => trainer.setCode(code),
    start: () => trainer.start(),
    pause: () => trainer.pause(),
    serviceWorker: () => sw,
  };
}

async function boot() {
  const store = await new Store().open();
  const compute = new Compute();
  const battery = await new Battery().open();
  const trainer = await new Trainer({ store, compute, battery, deviceModel: await deviceModel(), features }).init();
  const probe = new FrameProbe(() => compute.busy > 0);
  const pad = new Pad($('#pad'));
  const render = () => renderStatus(trainer.status, { running: trainer.running, battery, samples: store.samples.length });
  trainer.addEventListener('status', render);
  battery.addEventListener('change', render);
  store.addEventListener('samples', () => renderCounts(store.labelCounts()));
  setInterval(render, 1000); // the countdown of a wait
  renderCounts(store.labelCounts());
  wireDrawing({ pad, store, trainer, compute });
  $('#toggle').addEventListener('click', () => (trainer.running ? trainer.pause() : trainer.start()));
  $('#join').addEventListener('submit', (event) => {
    event.preventDefault();
    trainer.setCode($('#code').value);
    if (!trainer.running) trainer.start();
  });
  const code = new URLSearchParams(location.hash.slice(1)).get('join');
  if (code) { // the join link's code: kept, and taken out of the address bar
    await trainer.setCode(code);
    history.replaceState(null, '', location.pathname + location.search);
  }
  compute.ready.then((ok) => {
    say('runtime', ok ? `ONNX Runtime Web ${compute.version || ''} (WebAssembly, one thread, in a worker).` : '');
    if (!ok) trainer.stop('broken', compute.failure);
  });
  if (await store.get('paused', false)) trainer.stop();
  else trainer.start();
  render();
  const sw = registerServiceWorker();
  window.fleetDevice = hooks({ store, trainer, compute, probe, pad, sw });
  document.body.dataset.ready = 'true';
}

boot().catch((exc) => {
  say('phase', 'Cannot start');
  say('detail', `This browser could not start the device: ${exc.message}`);
  document.body.dataset.ready = 'failed';
});
