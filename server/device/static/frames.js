// How smooth the page stays while the worker computes: every requestAnimationFrame interval goes into a
// ring buffer, with whether a computation was in flight, for tests and the lab's browser benchmark
// (window.fleetDevice.frameGaps()). A hidden page gets no frames: its gap is not counted.

export class FrameProbe {
  constructor(isBusy, size = 4096) {
    this.isBusy = isBusy;
    this.gaps = new Float32Array(size);
    this.busy = new Uint8Array(size);
    this.count = 0;
    this.last = null;
    document.addEventListener('visibilitychange', () => { this.last = null; });
    const tick = (now) => {
      if (this.last !== null && document.visibilityState === 'visible') {
        const at = this.count % size;
        this.gaps[at] = now - this.last;
        this.busy[at] = this.isBusy() ? 1 : 0;
        this.count += 1;
      }
      this.last = now;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  clear() {
    this.count = 0;
    this.last = null;
  }

  /** {gaps: [ms...], busy: [0|1...]} oldest first (at most the ring's size). */
  snapshot() {
    const size = this.gaps.length;
    const n = Math.min(this.count, size);
    const start = this.count > size ? this.count % size : 0;
    const order = Array.from({ length: n }, (_, i) => (start + i) % size);
    return { gaps: order.map((i) => this.gaps[i]), busy: order.map((i) => this.busy[i]) };
  }
}
