// What the browser can honestly say about the phone: a device model name, the task request's features
// (null wherever the browser cannot read a value: never a made-up number) and the battery, where the
// Battery Status API exists (Chrome on Android and desktop; not Safari or Firefox).

/** "Pixel 7 (browser)": the model from User-Agent Client Hints or the user agent, else the platform. */
export async function deviceModel() {
  let model = '';
  try {
    const hints = await navigator.userAgentData?.getHighEntropyValues?.(['model', 'platform']);
    model = hints?.model || '';
  } catch { /* hints refused */ }
  if (!model) {
    const match = /Android [^;)]*; ([^;)]+?)(?: Build\/[^;)]*)?\)/.exec(navigator.userAgent);
    if (match && match[1] !== 'K') model = match[1].trim(); // "K": Chrome's reduced user agent hides it
  }
  if (!model) {
    const ua = navigator.userAgent;
    model = /iPhone/.test(ua) ? 'iPhone' : /iPad/.test(ua) ? 'iPad' : /Android/.test(ua) ? 'Android phone'
      : navigator.userAgentData?.platform || 'Desktop';
  }
  return `${model} (browser)`.slice(0, 120);
}

/** The features of POST /v1/tasks. Only the total memory is readable (navigator.deviceMemory, Chrome: a
 * coarse figure in GiB, rounded to a power of two and capped at 8); the rest stays null. */
export function features() {
  const gib = Number(navigator.deviceMemory);
  return {
    available_memory: null,
    total_memory: Number.isFinite(gib) && gib > 0 ? gib * 2 ** 30 : null,
    temperature: null,
    cpu_freq_sum: null,
    energy_per_cpu_time: null,
  };
}

/** The battery through navigator.getBattery(), or a plain "not exposed". */
export class Battery extends EventTarget {
  constructor() {
    super();
    this.manager = null;
    this.supported = typeof navigator.getBattery === 'function';
  }

  async open() {
    if (!this.supported) return this;
    try {
      this.manager = await navigator.getBattery();
      for (const name of ['levelchange', 'chargingchange']) {
        this.manager.addEventListener(name, () => this.dispatchEvent(new Event('change')));
      }
    } catch {
      this.supported = false;
    }
    return this;
  }

  /** {level: 0..1, charging} now, or null. */
  read() {
    return this.manager ? { level: this.manager.level, charging: this.manager.charging } : null;
  }

  /** % battery used between two readings, only when it was measurably used on battery power; else null
   * (the usual case: one task rarely moves the level's 1% steps, and null is the honest answer). */
  drop(before, after) {
    if (!before || !after || before.charging || after.charging) return null;
    const used = (before.level - after.level) * 100;
    return used > 0 ? Math.round(used * 1000) / 1000 : null;
  }

  describe() {
    const now = this.read();
    if (!now && !window.isSecureContext) return 'Not readable over plain http (the Battery Status API needs https).';
    if (!now) return 'This browser does not expose the battery.';
    return `${Math.round(now.level * 100)}%${now.charging ? ', charging' : ', on battery'}`;
  }
}
