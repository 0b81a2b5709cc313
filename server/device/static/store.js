// What the page keeps in IndexedDB: its identity (install secret, device id, token, join code, counters)
// and the labelled drawings it trains on. Nothing here is ever sent: only counts of labels and gradients
// leave the page. Images are 28×28 uint8 (ink 255), as client/app/drawing.py keeps them.

export const SIDE = 28;
export const PIXELS = SIDE * SIDE;
const DB_NAME = 'fleet-device';

function promised(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

function done(transaction) {
  return new Promise((resolve, reject) => {
    transaction.oncomplete = () => resolve();
    transaction.onerror = transaction.onabort = () => reject(transaction.error);
  });
}

/** 32 URL-safe characters from the browser's secure random source (the install secret). */
export function randomSecret(length = 32) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  return Array.from(bytes, (b) => alphabet[b & 63]).join('');
}

/** A float image in [0, 1] as the stored uint8 (rounded, like numpy's rint on x·255). */
export function toBytes(values) {
  const out = new Uint8Array(PIXELS);
  for (let i = 0; i < PIXELS; i++) {
    const v = Math.round(Math.min(1, Math.max(0, Number(values[i]) || 0)) * 255);
    out[i] = v;
  }
  return out;
}

export class Store extends EventTarget {
  constructor() {
    super();
    this.db = null;
    this.samples = []; // [{id, x: Uint8Array(784), y}], oldest first: the in-memory mirror
  }

  async open() {
    const request = indexedDB.open(DB_NAME, 1);
    request.onupgradeneeded = () => {
      const db = request.result;
      db.createObjectStore('kv');
      db.createObjectStore('samples', { keyPath: 'id', autoIncrement: true });
    };
    this.db = await promised(request);
    const rows = await promised(this.db.transaction('samples').objectStore('samples').getAll());
    this.samples = rows.map((r) => ({ id: r.id, x: new Uint8Array(r.x), y: r.y }));
    return this;
  }

  async get(key, fallback = null) {
    const value = await promised(this.db.transaction('kv').objectStore('kv').get(key));
    return value === undefined ? fallback : value;
  }

  async set(key, value) {
    const tx = this.db.transaction('kv', 'readwrite');
    tx.objectStore('kv').put(value, key);
    await done(tx);
  }

  /** The install's own secret, made once and kept: enrolling again with it keeps the device id. */
  async installSecret() {
    let secret = await this.get('install_secret');
    if (!secret) {
      secret = randomSecret();
      await this.set('install_secret', secret);
    }
    return secret;
  }

  /** Keep labelled images: `images` are 784 values each (floats in [0, 1] or a Uint8Array). */
  async addSamples(images, labels) {
    if (images.length !== labels.length) throw new Error('one label per image');
    const rows = images.map((image, i) => {
      const y = Number(labels[i]);
      if (!Number.isInteger(y) || y < 0 || y > 9) throw new Error(`label must be a digit 0-9, got ${labels[i]}`);
      if (image.length !== PIXELS) throw new Error(`an image has ${PIXELS} pixels, got ${image.length}`);
      // a copy of its own 784 bytes: IndexedDB stores a view's whole underlying buffer
      return { x: image instanceof Uint8Array ? image.slice() : toBytes(image), y, at: Date.now() };
    });
    const tx = this.db.transaction('samples', 'readwrite');
    const store = tx.objectStore('samples');
    const ids = rows.map((row) => promised(store.add(row)));
    await done(tx);
    const keys = await Promise.all(ids);
    rows.forEach((row, i) => this.samples.push({ id: keys[i], x: row.x, y: row.y }));
    this.changed();
    return this.samples.length;
  }

  /** Forget the last drawing kept (undo a wrong label). */
  async removeLast() {
    const last = this.samples.at(-1);
    if (!last) return 0;
    const tx = this.db.transaction('samples', 'readwrite');
    tx.objectStore('samples').delete(last.id);
    await done(tx);
    this.samples.pop();
    this.changed();
    return this.samples.length;
  }

  async clearSamples() {
    const tx = this.db.transaction('samples', 'readwrite');
    tx.objectStore('samples').clear();
    await done(tx);
    this.samples = [];
    this.changed();
  }

  changed() {
    this.dispatchEvent(new Event('samples'));
  }

  /** Examples per class (labels at or past `classes` are counted nowhere: the caller checks). */
  labelCounts(classes = 10) {
    const counts = new Array(classes).fill(0);
    for (const s of this.samples) if (s.y < classes) counts[s.y] += 1;
    return counts;
  }

  /** min(size, N) examples without replacement (all N, in order, when size ≥ N, as DeviceData.batch):
   * x as float32 in [0, 1] (N·784 values), y as labels. */
  batch(size) {
    const n = this.samples.length;
    let index = [...Array(n).keys()];
    if (size < n) {
      for (let i = 0; i < size; i++) { // a partial Fisher–Yates shuffle
        const j = i + Math.floor(Math.random() * (n - i));
        [index[i], index[j]] = [index[j], index[i]];
      }
      index = index.slice(0, size).sort((a, b) => a - b);
    }
    const x = new Float32Array(index.length * PIXELS);
    const y = new Int32Array(index.length);
    index.forEach((k, row) => {
      const sample = this.samples[k];
      for (let p = 0; p < PIXELS; p++) x[row * PIXELS + p] = sample.x[p] / 255;
      y[row] = sample.y;
    });
    return { x, y };
  }
}
