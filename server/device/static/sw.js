// The service worker: the app shell and the vendored ONNX Runtime Web files are cached so the page opens
// offline; everything is fetched from the network first (revalidated: a new build is seen at once) and the
// cache answers only when the network does not. API responses (/v1/...) are never cached: this worker
// answers only for /device/ itself. It needs a secure context (https, or localhost).

const CACHE = 'fleet-device-1';
const SHELL = [
  './', 'index.html', 'device.css', 'app.js', 'compute.js', 'compute-worker.js', 'device-info.js', 'frames.js',
  'image.js', 'pad.js', 'protocol.js', 'store.js', 'trainer.js', 'view.js', 'manifest.webmanifest',
  'icons/icon-192.png', 'icons/icon-512.png',
  'vendor/ort.wasm.min.mjs', 'vendor/ort-wasm-simd-threaded.mjs', 'vendor/ort-wasm-simd-threaded.wasm',
];
const SCOPE = new URL('./', self.location).pathname;

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) if (name !== CACHE) await caches.delete(name);
    await self.clients.claim();
  })());
});

async function networkFirst(request) {
  const cache = await caches.open(CACHE);
  try {
    const fresh = await fetch(request);
    if (fresh.status === 200) {
      const cached = await cache.match(request, { ignoreSearch: true });
      const etag = fresh.headers.get('ETag');
      if (!cached || !etag || cached.headers.get('ETag') !== etag) await cache.put(request, fresh.clone());
    }
    return fresh;
  } catch (exc) {
    const cached = await cache.match(request, { ignoreSearch: true })
      || (request.mode === 'navigate' ? await cache.match('./') : undefined);
    if (cached) return cached;
    throw exc;
  }
}

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin || !url.pathname.startsWith(SCOPE)) {
    return; // the API and anything else: straight to the network, never cached
  }
  event.respondWith(networkFirst(event.request));
});
