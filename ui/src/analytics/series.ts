// A dataset's points as the charts need them: fetched once per window and then
// incrementally (only the newest bucket and what is new, since sealed seconds
// never change), kept per resolution, pruned to a bounded history.

import * as api from '../api';
import type { Range } from './timewindow';

export class SeriesCache {
  /** The dataset as the daemon describes it (since, breakdown unit, built-in...). */
  info: api.DatasetInfo | null = null;
  private readonly points = new Map<number, api.Point>();
  private resolution: api.Resolution | null = null;
  /** The range fetched so far, [lo, hi]; empty while hi < lo. */
  private lo = 0;
  private hi = -1;

  constructor(readonly name: string) {}

  /** Fetches what `r` needs that is not here yet. */
  async fetch(r: Range): Promise<void> {
    const contiguous = this.resolution === r.resolution && this.hi >= this.lo && r.end >= this.lo - r.step && r.start <= this.hi + r.step;
    if (!contiguous) {
      const s = await api.data({ name: this.name, start: r.start, end: r.end, resolution: r.resolution });
      this.points.clear();
      this.resolution = r.resolution;
      this.lo = r.start;
      this.hi = r.end;
      this.take(s);
    } else {
      if (r.start < this.lo) {
        const s = await api.data({ name: this.name, start: r.start, end: this.lo - 1, resolution: r.resolution });
        this.lo = r.start;
        this.take(s);
      }
      if (r.end > this.hi) {
        // The newest minute or hour is still filling: read it again.
        const from = Math.floor(this.hi / r.step) * r.step;
        const s = await api.data({ name: this.name, start: from, end: r.end, resolution: r.resolution });
        this.hi = r.end;
        this.take(s);
      }
    }
    this.prune(r);
  }

  private take(s: api.Series): void {
    this.info = {
      name: s.name,
      statistic: s.statistic,
      description: s.description,
      unit: s.unit,
      breakdown: s.breakdown,
      breakdown_unit: s.breakdown_unit,
      filters: s.filters,
      builtin: s.builtin,
      since: s.since,
      gauge: s.gauge,
      divisor: s.divisor,
    };
    for (const p of s.points) this.points.set(p.t, p);
  }

  /** Keeps one window's width either side of `r`. */
  private prune(r: Range): void {
    const width = r.end - r.start + 1;
    const lo = r.start - width;
    const hi = r.end + width;
    for (const t of this.points.keys()) if (t < lo || t > hi) this.points.delete(t);
    this.lo = Math.max(this.lo, lo);
    this.hi = Math.min(this.hi, hi);
  }

  /** The points inside `r`, oldest first. */
  inRange(r: Range): api.Point[] {
    const out: api.Point[] = [];
    for (const p of this.points.values()) if (p.t >= r.start && p.t <= r.end) out.push(p);
    return out.sort((a, b) => a.t - b.t);
  }

  /** The point at t, if fetched. */
  at(t: number): api.Point | undefined {
    return this.points.get(t);
  }

  /** Forgets everything (the dataset was enabled again, or the window jumped). */
  reset(): void {
    this.points.clear();
    this.resolution = null;
    this.lo = 0;
    this.hi = -1;
  }
}
