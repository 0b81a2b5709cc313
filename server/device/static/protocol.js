// The device side of Fleet's REST protocol (docs/protocol.md), as client/_transport.py speaks it:
// enroll, the active model, a task, the model's files, a version's parameters, a push. Every refusal
// becomes a FleetError whose `kind` says what the loop does next (trainer.js).

export const DEFAULT_RETRY_AFTER = 5;
const TIMEOUT_MS = 60_000;
// 403 reasons of POST /v1/devices that no retry changes (server/api/routes/devices.py)
const ENROLLMENT_REFUSALS = new Set(['enrollment_quota', 'attestation_refused', 'install_revoked']);

/** A request that did not give what was asked. `kind`: finished (training is over), rejected (503 with a
 * reason, or 429: wait `retryAfter`), auth (401), refused (enrollment refused for good), gone (410),
 * transport (no answer, 5xx, 408: try again), error (anything else). */
export class FleetError extends Error {
  constructor(message, { kind = 'error', status = 0, reason = null, retryAfter = null } = {}) {
    super(message);
    this.kind = kind;
    this.status = status;
    this.reason = reason;
    this.retryAfter = retryAfter;
  }
}

/** Seconds to wait: the body's retry_after, else the Retry-After header (seconds or an HTTP date). */
export function retryAfter(bodyValue, header) {
  for (const value of [bodyValue, header]) {
    if (value === null || value === undefined || value === '') continue;
    const seconds = Number(value);
    if (Number.isFinite(seconds)) return Math.max(0, seconds);
    const when = Date.parse(String(value));
    if (Number.isFinite(when)) return Math.max(0, (when - Date.now()) / 1000);
  }
  return DEFAULT_RETRY_AFTER;
}

async function errorFrom(response, where) {
  let data = {};
  try {
    const parsed = await response.json();
    if (parsed && typeof parsed === 'object') data = parsed;
  } catch { /* not JSON: the status says enough */ }
  const status = response.status;
  const detail = typeof data.detail === 'string' ? data.detail
    : data.detail ? JSON.stringify(data.detail) : (response.statusText || `HTTP ${status}`);
  const reason = typeof data.reason === 'string' ? data.reason : null;
  const wait = retryAfter(data.retry_after, response.headers.get('Retry-After'));
  const base = { status, reason, retryAfter: wait };
  if (reason === 'training_finished') return new FleetError(detail, { ...base, kind: 'finished' });
  if (status === 403 && ENROLLMENT_REFUSALS.has(reason)) {
    return new FleetError(`enrollment refused (${reason}): ${detail}`, { ...base, kind: 'refused' });
  }
  if (status === 503 && reason) return new FleetError(detail, { ...base, kind: 'rejected' });
  if (status === 429) return new FleetError(detail, { ...base, reason: reason || 'rate_limited', kind: 'rejected' });
  if (status === 401) return new FleetError(`${where}: ${detail}`, { ...base, kind: 'auth' });
  if (status === 410) return new FleetError(`${where}: ${detail}`, { ...base, kind: 'gone' });
  if (status >= 500 || status === 408) return new FleetError(`${where}: ${status} ${detail}`, { ...base, kind: 'transport' });
  return new FleetError(`${where}: ${status} ${detail}`, base);
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** A Float32Array as raw little-endian float32 bytes (every browser in use is little-endian already). */
export function littleEndian(values) {
  if (LITTLE_ENDIAN) return values;
  const view = new DataView(new ArrayBuffer(values.length * 4));
  values.forEach((v, i) => view.setFloat32(i * 4, v, true));
  return new Float32Array(view.buffer);
}

export class Api {
  /** `base`: the coordinator's origin ('' on the page it serves); `token`: a device's bearer token. */
  constructor(base = '', token = null) {
    this.base = base;
    this.token = token;
  }

  async request(method, url, { json, body, headers = {}, auth = true } = {}) {
    const sent = { ...headers };
    if (auth && this.token) sent.Authorization = `Bearer ${this.token}`;
    if (json !== undefined) {
      sent['Content-Type'] = 'application/json';
      body = JSON.stringify(json);
    }
    const where = `${method} ${url.split('?')[0]}`;
    let response;
    try {
      const signal = AbortSignal.timeout ? AbortSignal.timeout(TIMEOUT_MS) : undefined;
      response = await fetch(this.base + url, { method, headers: sent, body, signal, cache: 'no-store' });
    } catch (exc) {
      const offline = typeof navigator !== 'undefined' && navigator.onLine === false;
      const why = offline ? 'offline' : (exc?.name === 'TimeoutError' ? 'timed out' : 'no answer');
      throw new FleetError(`${where}: ${why}`, { kind: 'transport', reason: offline ? 'offline' : 'network' });
    }
    if (!response.ok) throw await errorFrom(response, where);
    return response;
  }

  /** POST /v1/devices: the same install secret gives the same device id back, with a new token. */
  async enroll({ enrollmentKey, deviceModel, installSecret }) {
    const body = { enrollment_key: enrollmentKey, device_model: deviceModel, install_secret: installSecret };
    const data = await (await this.request('POST', '/v1/devices', { json: body, auth: false })).json();
    if (typeof data.device_id !== 'string' || typeof data.token !== 'string') {
      throw new FleetError('malformed enrollment answer');
    }
    this.token = data.token;
    return data;
  }

  /** ModelInfo of the model that trains now; 404 becomes a rejection "no_model". */
  async activeModel() {
    try {
      return await (await this.request('GET', '/v1/models/active', { auth: false })).json();
    } catch (exc) {
      if (exc.status === 404) {
        throw new FleetError('no model is training', { kind: 'rejected', status: 404, reason: 'no_model', retryAfter: DEFAULT_RETRY_AFTER });
      }
      throw exc;
    }
  }

  /** POST /v1/tasks → a grant (task_id, model_id, version, batch_size, lease_deadline, the URLs...). */
  async requestTask({ deviceModel, features, labelCounts, localExamples }) {
    const body = { device_model: deviceModel, features, label_counts: labelCounts, local_examples: localExamples };
    const grant = await (await this.request('POST', '/v1/tasks', { json: body })).json();
    if (typeof grant.task_id !== 'string' || !Number.isInteger(grant.batch_size)) {
      throw new FleetError('malformed task grant');
    }
    return grant;
  }

  async json(url) {
    return (await this.request('GET', url, { auth: false })).json();
  }

  async bytes(url) {
    return (await this.request('GET', url, { auth: false })).arrayBuffer();
  }

  /** A version's flat float32 parameters (raw little-endian), checked against the manifest's size. */
  async params(url, numParams) {
    const buffer = await this.bytes(url);
    if (buffer.byteLength !== numParams * 4) {
      throw new FleetError(`parameters hold ${buffer.byteLength / 4} values, the manifest says ${numParams}`);
    }
    const view = new DataView(buffer);
    return LITTLE_ENDIAN ? new Float32Array(buffer)
      : Float32Array.from({ length: numParams }, (_, i) => view.getFloat32(i * 4, true));
  }

  /** POST /v1/tasks/{id}/decline: give a task back unrun (terms this page cannot compute). */
  async decline(taskId, reason, detail) {
    const url = `/v1/tasks/${encodeURIComponent(taskId)}/decline`;
    await this.request('POST', url, { json: { reason, detail: detail.slice(0, 500) } });
  }

  /** POST /v1/tasks/{id}/result: the raw float32 body, the meta as compact JSON in Fleet-Meta. */
  async push(taskId, meta, gradient) {
    const headers = { 'Content-Type': 'application/octet-stream', 'Fleet-Meta': JSON.stringify(meta) };
    const url = `/v1/tasks/${encodeURIComponent(taskId)}/result`;
    return (await this.request('POST', url, { body: littleEndian(gradient), headers })).json();
  }
}
