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

/** A monotonic clock in ms shared by every thread of the process (uv_hrtime), unlike performance.now(). */
export function monoMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export interface Summary {
  n: number;
  p50: number;
  p99: number;
  max: number;
}

/** n, p50, p99 and max of sorted samples (NaN when empty). */
export function summarize(sorted: Float64Array): Summary {
  return {
    n: sorted.length,
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
  };
}

/** "p50 1.23  p99 4.56  max 7.89 ms" */
export function fmtSummary(s: Summary, digits = 2): string {
  const f = (n: number) => (Number.isFinite(n) ? n.toFixed(digits) : "-");
  return `p50 ${f(s.p50)}  p99 ${f(s.p99)}  max ${f(s.max)} ms`;
}
