/** Latency samples (ms) -> percentiles, nearest rank. */
export function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

/** Growable Float64 sample buffer. */
export class Samples {
  private buf = new Float64Array(1 << 14);
  n = 0;
  push(v: number): void {
    if (this.n === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.n++] = v;
  }
  /** A sorted copy of the samples. */
  sorted(): Float64Array {
    return this.buf.slice(0, this.n).sort();
  }
}
