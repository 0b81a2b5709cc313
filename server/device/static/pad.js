// The drawing pad: pointer events (finger, pen or mouse) into strokes, drawn as they come; the strokes
// become a 28×28 image through image.js. Touch on the pad never scrolls the page (touch-action: none).

import { strokesToImage } from './image.js';

export class Pad extends EventTarget {
  constructor(canvas) {
    super();
    this.canvas = canvas;
    this.strokes = [];
    this.active = null;
    this.context = canvas.getContext('2d');
    canvas.addEventListener('pointerdown', (e) => this.down(e));
    canvas.addEventListener('pointermove', (e) => this.move(e));
    for (const name of ['pointerup', 'pointercancel']) canvas.addEventListener(name, (e) => this.up(e));
    new ResizeObserver(() => this.resize()).observe(canvas);
    this.resize();
  }

  resize() {
    const ratio = window.devicePixelRatio || 1;
    const { width, height } = this.canvas.getBoundingClientRect();
    this.canvas.width = Math.max(1, Math.round(width * ratio));
    this.canvas.height = Math.max(1, Math.round(height * ratio));
    this.context.setTransform(ratio, 0, 0, ratio, 0, 0);
    this.redraw();
  }

  point(event) {
    const box = this.canvas.getBoundingClientRect();
    return [event.clientX - box.left, event.clientY - box.top];
  }

  down(event) {
    if (this.active !== null) return;
    this.active = event.pointerId;
    this.canvas.setPointerCapture?.(event.pointerId);
    this.strokes.push([this.point(event)]);
    this.redraw();
    event.preventDefault();
  }

  move(event) {
    if (event.pointerId !== this.active) return;
    const events = event.getCoalescedEvents?.() || [event];
    for (const e of events.length ? events : [event]) this.strokes.at(-1).push(this.point(e));
    this.redraw();
  }

  up(event) {
    if (event.pointerId !== this.active) return;
    this.active = null;
    this.dispatchEvent(new Event('drawn'));
  }

  undo() {
    this.strokes.pop();
    this.redraw();
  }

  clear() {
    this.strokes = [];
    this.redraw();
  }

  get empty() {
    return this.strokes.length === 0;
  }

  /** The drawing as the model sees it: Float32Array(784) in [0, 1]. */
  image() {
    return strokesToImage(this.strokes);
  }

  redraw() {
    const ctx = this.context;
    const { width, height } = this.canvas.getBoundingClientRect();
    ctx.fillStyle = '#14171f';
    ctx.fillRect(0, 0, width, height);
    ctx.strokeStyle = '#ffffff';
    ctx.fillStyle = '#ffffff';
    ctx.lineWidth = Math.max(8, width / 18);
    ctx.lineCap = ctx.lineJoin = 'round';
    for (const stroke of this.strokes) {
      if (stroke.length === 1) {
        ctx.beginPath();
        ctx.arc(stroke[0][0], stroke[0][1], ctx.lineWidth / 2, 0, Math.PI * 2);
        ctx.fill();
        continue;
      }
      ctx.beginPath();
      ctx.moveTo(...stroke[0]);
      for (const [x, y] of stroke.slice(1)) ctx.lineTo(x, y);
      ctx.stroke();
    }
  }
}
