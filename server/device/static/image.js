// A finger's strokes as an MNIST-like 28×28 image, exactly as client/app/drawing.py makes one: the
// drawing's bounding box scaled into 20×20 (drawn 4× oversampled, pen radius 1.1 px of the 28×28 image),
// averaged down to 28×28, then moved so its centre of mass is the image's centre. Ink = 1.
// Points are canvas coordinates (y grows downwards, so no flip: drawing.py flips Kivy's y-up).

const SIDE = 28;
const BOX = 20;
const OVERSAMPLE = 4;
const PEN = 1.1;

/** Python's round(): halves go to the even neighbour. */
function roundHalfEven(v) {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** Points along the polyline no more than `step` apart (a tap is one point). */
function dense(xy, step) {
  if (xy.length === 1) return xy;
  const out = [xy[0]];
  for (let k = 1; k < xy.length; k++) {
    const [ax, ay] = xy[k - 1];
    const [bx, by] = xy[k];
    const n = Math.max(1, Math.ceil(Math.hypot(bx - ax, by - ay) / step));
    for (let i = 1; i <= n; i++) out.push([ax + ((bx - ax) * i) / n, ay + ((by - ay) * i) / n]);
  }
  return out;
}

function ink(canvas, size, centres, radius) {
  const r = Math.ceil(radius);
  for (const [x, y] of centres) {
    const top = Math.max(0, Math.trunc(y) - r);
    const left = Math.max(0, Math.trunc(x) - r);
    const bottom = Math.min(size, Math.trunc(y) + r + 2);
    const right = Math.min(size, Math.trunc(x) + r + 2);
    for (let row = top; row < bottom; row++) {
      for (let col = left; col < right; col++) {
        if ((row - y) ** 2 + (col - x) ** 2 <= radius * radius) canvas[row * size + col] = 1;
      }
    }
  }
}

function centreOfMass(image) {
  let total = 0;
  let rows = 0;
  let cols = 0;
  for (let r = 0; r < SIDE; r++) {
    for (let c = 0; c < SIDE; c++) {
      const v = image[r * SIDE + c];
      total += v;
      rows += r * v;
      cols += c * v;
    }
  }
  if (total <= 0) return image;
  const dy = roundHalfEven(SIDE / 2 - 0.5 - rows / total);
  const dx = roundHalfEven(SIDE / 2 - 0.5 - cols / total);
  const shifted = new Float32Array(SIDE * SIDE);
  for (let r = 0; r < SIDE; r++) {
    for (let c = 0; c < SIDE; c++) {
      const tr = r + dy;
      const tc = c + dx;
      if (tr >= 0 && tr < SIDE && tc >= 0 && tc < SIDE) shifted[tr * SIDE + tc] = Math.min(1, Math.max(0, image[r * SIDE + c]));
    }
  }
  return shifted;
}

/** Strokes ([[x, y], ...] each, canvas coordinates) → Float32Array(784) in [0, 1]; all zero if no ink. */
export function strokesToImage(strokes) {
  const points = strokes.filter((s) => s.length);
  if (!points.length) return new Float32Array(SIDE * SIDE);
  let lowX = Infinity, lowY = Infinity, highX = -Infinity, highY = -Infinity;
  for (const stroke of points) {
    for (const [x, y] of stroke) {
      lowX = Math.min(lowX, x); lowY = Math.min(lowY, y);
      highX = Math.max(highX, x); highY = Math.max(highY, y);
    }
  }
  const scale = (BOX * OVERSAMPLE) / Math.max(highX - lowX, highY - lowY, 1e-6);
  const size = SIDE * OVERSAMPLE;
  const offsetX = (size - (highX - lowX) * scale) / 2;
  const offsetY = (size - (highY - lowY) * scale) / 2;
  const radius = PEN * OVERSAMPLE;
  const canvas = new Float32Array(size * size);
  for (const stroke of points) {
    const xy = stroke.map(([x, y]) => [(x - lowX) * scale + offsetX, (y - lowY) * scale + offsetY]);
    ink(canvas, size, dense(xy, radius / 3), radius);
  }
  const image = new Float32Array(SIDE * SIDE);
  for (let r = 0; r < size; r++) {
    for (let c = 0; c < size; c++) {
      image[Math.floor(r / OVERSAMPLE) * SIDE + Math.floor(c / OVERSAMPLE)] += canvas[r * size + c];
    }
  }
  for (let i = 0; i < image.length; i++) image[i] /= OVERSAMPLE * OVERSAMPLE;
  return centreOfMass(image);
}
