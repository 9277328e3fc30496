// Heatmaps of numeric breakdowns (latency, size, offset): time across, the
// daemon's log-linear buckets up a log axis, colour for how many events fell in
// each bucket each second (minute, hour). Drawn on uPlot's canvas so it shares
// the worksheet's time axis, synced cursor and range selection. The side panel
// reads out the bucket under the cursor and percentiles over the window.
// Dragging up or down (or clicking a row) selects a band of bucket rows, drawn on
// the canvas; its panel drills into the events in the band by another dimension
// of the statistic (which files had the slow operations?) or zooms into it (a
// heatmap of the band alone).

import uPlot from 'uplot';
import type * as api from '../api';
import { h, replace } from '../dom';
import { fmtBound, fmtClock, fmtDuration } from '../format';
import { Card, rangeText, type CardHost } from './card';
import { bandDimensions, drillBand, formatRange, type NumRange } from './dataset';
import type { Range } from './timewindow';

/** Colour ramp from few to many events: pale yellow, orange, red, dark purple. */
const RAMP: [number, number, number][] = [
  [255, 240, 170],
  [253, 190, 90],
  [245, 120, 50],
  [215, 48, 39],
  [150, 15, 60],
  [70, 10, 70],
];

function rampColor(f: number): string {
  const x = Math.max(0, Math.min(1, f)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const t = x - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const PERCENTILES = [50, 90, 99];

/** A row of the heatmap: one bucket, its events over the window, where it is drawn. */
interface Row {
  low: number;
  high: number;
  count: number;
  /** CSS pixels from the top of the plot area, top < bottom; NaN until drawn. */
  top: number;
  bottom: number;
}

/** A click this close (pixels) to a row with events selects it: rows can be thin. */
const CLICK_SLACK = 6;
/** Bucket bounds past this are not exact in JavaScript; such a band is open at the top. */
const MAX_EXACT = Number.MAX_SAFE_INTEGER;

export class HeatmapCard extends Card {
  private points: api.Point[] = [];
  private byT = new Map<number, api.Point>();
  private yLo = 1;
  private yHi = 1e6;
  /** The largest per-second rate of one cell in the window: the top of the colour scale. */
  private maxRate = 0;
  private cells = 0;
  private cursorTop: number | null = null;
  /** Rows with events in the window, lowest first. */
  private rows: Row[] = [];
  /** The selected band: bucket bounds as the daemon gave them; `drawLow` is where its bottom is drawn. */
  private band: { low: number; high: number; drawLow: number } | null = null;
  private readonly bandEl: HTMLElement;
  private downAt: { x: number; y: number } | null = null;
  private readonly readout: HTMLElement;
  private readonly stats: HTMLElement;
  private readonly scale: HTMLElement;

  constructor(name: string, host: CardHost) {
    super(name, host, 'heatmap');
    this.readout = h('div', { class: 'heat-readout', 'data-test': 'heat-readout' });
    this.stats = h('div', { class: 'heat-stats', 'data-test': 'heat-stats' });
    this.scale = h('div', { class: 'heat-scale' });
    replace(this.side, this.readout, this.stats, this.scale);
    this.bandEl = h('div', { class: 'band-menu', 'data-test': 'heatmap-band-menu', hidden: true });
    this.el.querySelector('.chart-main')?.after(this.bandEl);
  }

  private get unit(): string | null {
    return this.cache.info?.breakdown_unit ?? this.host.catalog.dimension(this.spec.statistic, this.spec.breakdown ?? '')?.unit ?? null;
  }

  protected draw(r: Range): void {
    this.points = this.cache.inRange(r);
    this.byT = new Map(this.points.map((p) => [p.t, p]));
    const n = Math.floor((r.end - r.start) / r.step) + 1;
    this.xs = Array.from({ length: n }, (_, i) => r.start + i * r.step);

    let lo = Infinity;
    let hi = 0;
    let maxRate = 0;
    for (const p of this.points) {
      for (const b of p.buckets ?? []) {
        if (b.count <= 0) continue;
        lo = Math.min(lo, lowOf(b));
        hi = Math.max(hi, b.high);
        maxRate = Math.max(maxRate, b.count / p.seconds);
      }
    }
    // Whole decades around the data, at least three, so the axis reads at a glance.
    if (hi > 0) {
      let dLo = Math.floor(Math.log10(lo));
      let dHi = Math.ceil(Math.log10(hi));
      while (dHi - dLo < 3) {
        if (dLo > 0) dLo--;
        else dHi++;
      }
      this.yLo = 10 ** dLo;
      this.yHi = 10 ** dHi;
    } else if (this.unit === 'microseconds') {
      this.yLo = 10;
      this.yHi = 1e5;
    } else {
      this.yLo = 1;
      this.yHi = 1e6;
    }
    this.maxRate = maxRate;

    const byLow = new Map<number, Row>();
    for (const p of this.points) {
      for (const b of p.buckets ?? []) {
        if (b.count <= 0) continue;
        const row = byLow.get(b.low) ?? { low: b.low, high: b.high, count: 0, top: NaN, bottom: NaN };
        row.count += b.count;
        byLow.set(b.low, row);
      }
    }
    this.rows = [...byLow.values()].sort((a, b) => a.low - b.low);

    // uPlot needs a y series to lay out; the cells are drawn in the draw hook.
    const data: uPlot.AlignedData = [this.xs, this.xs.map(() => null)];
    if (!this.plot) {
      this.plot = new uPlot(this.options(), data, this.plotEl);
      this.listenForClicks(this.plot);
    } else {
      this.plot.setData(data, true);
    }
    this.applySelection(this.plot);
    this.updateSide();
    this.drawScale();
  }

  private options(): uPlot.Options {
    const o = this.baseOptions(210);
    const unit = () => this.unit;
    o.series = [{}, { label: 'buckets', stroke: 'transparent', points: { show: false } }];
    o.scales = {
      ...o.scales,
      y: { distr: 3, log: 10, auto: false, range: () => [this.yLo, this.yHi] },
    };
    o.axes = [
      o.axes![0],
      {
        ...o.axes![1],
        splits: () => {
          const out: number[] = [];
          for (let v = this.yLo; v <= this.yHi * 1.0001; v *= 10) out.push(v);
          return out;
        },
        values: (_u, splits) => splits.map((v) => fmtBound(v, unit()).replace(' ', '\u2009')),
      },
    ];
    o.hooks = { ...o.hooks, draw: [(u) => this.drawCells(u)] };
    // A drag selects along one direction, whichever it mostly goes: across for a
    // time range, up or down for a band of rows.
    o.cursor = { ...o.cursor, drag: { x: true, y: true, uni: Infinity, dist: 3, setScale: false } };
    return o;
  }

  private drawCells(u: uPlot): void {
    const r = this.range;
    if (!r) return;
    const ctx = u.ctx;
    const { left, top, width, height } = u.bbox;
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, top, width, height);
    ctx.clip();
    const logMax = Math.log1p(this.maxRate);
    let cells = 0;
    for (const p of this.points) {
      const x0 = u.valToPos(p.t, 'x', true);
      const x1 = u.valToPos(p.t + p.seconds, 'x', true);
      const w = Math.max(1, x1 - x0 - (x1 - x0 > 4 ? 1 : 0));
      for (const b of p.buckets ?? []) {
        if (b.count <= 0) continue;
        const y0 = u.valToPos(lowOf(b), 'y', true);
        const y1 = u.valToPos(b.high, 'y', true);
        const f = logMax > 0 ? Math.log1p(b.count / p.seconds) / logMax : 1;
        ctx.fillStyle = rampColor(0.08 + 0.92 * f);
        ctx.fillRect(x0, y1, w, Math.max(1, y0 - y1));
        cells++;
      }
    }
    this.drawBand(u);
    ctx.restore();
    this.cells = cells;
    this.el.dataset.cells = String(cells);
    for (const row of this.rows) {
      row.top = u.valToPos(row.high, 'y');
      row.bottom = u.valToPos(lowOf(row), 'y');
    }
    // Where each row is, for scripts that select one: CSS pixels from the top of .u-over.
    this.el.dataset.rows = JSON.stringify(
      this.rows.map((r) => ({ low: r.low, high: r.high, count: r.count, top: round1(r.top), bottom: round1(r.bottom) })),
    );
  }

  /** The selected band across the plot: the rest washed out, the band's two edges drawn. */
  private drawBand(u: uPlot): void {
    if (!this.band) return;
    const { left, top, width, height } = u.bbox;
    const y0 = Math.max(top, u.valToPos(Math.min(this.band.high, this.yHi * 10), 'y', true));
    const y1 = Math.min(top + height, u.valToPos(this.band.drawLow, 'y', true));
    const ctx = u.ctx;
    ctx.fillStyle = 'rgba(255,255,255,0.6)';
    ctx.fillRect(left, top, width, Math.max(0, y0 - top));
    ctx.fillRect(left, y1, width, Math.max(0, top + height - y1));
    ctx.strokeStyle = '#2f6fb5';
    ctx.lineWidth = Math.max(1.5, devicePixelRatio * 1.5);
    ctx.beginPath();
    ctx.moveTo(left, y0);
    ctx.lineTo(left + width, y0);
    ctx.moveTo(left, y1);
    ctx.lineTo(left + width, y1);
    ctx.stroke();
  }

  // --- band selection -------------------------------------------------------------

  /** A drag mostly up or down selects the rows it covers; one across is a time range. */
  protected onSelectBox(u: uPlot): void {
    const sel = u.select;
    const w = u.over.clientWidth;
    const hgt = u.over.clientHeight;
    const fullWidth = sel.left <= 0.5 && sel.width >= w - 1;
    const fullHeight = sel.top <= 0.5 && sel.height >= hgt - 1;
    if (sel.height > 0 && fullWidth && !fullHeight) {
      this.selectRows(this.rows.filter((r) => r.top < sel.top + sel.height && r.bottom > sel.top));
      // The band is drawn on the canvas; the box goes back to the time range, if any.
      if (this.selection) this.applySelection(u);
      else u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      return;
    }
    super.onSelectBox(u);
  }

  /** A click (not a drag) on the plot selects the row under it, or the nearest within a few pixels. */
  private listenForClicks(u: uPlot): void {
    u.over.addEventListener('mousedown', (e) => {
      this.downAt = { x: e.clientX, y: e.clientY };
    });
    u.over.addEventListener('click', (e) => {
      const d = this.downAt;
      this.downAt = null;
      if (!d || Math.abs(e.clientX - d.x) >= 3 || Math.abs(e.clientY - d.y) >= 3) return;
      const y = e.clientY - u.over.getBoundingClientRect().top;
      let best: Row | null = null;
      let bestDist = Infinity;
      for (const r of this.rows) {
        const dist = y < r.top ? r.top - y : y >= r.bottom ? y - r.bottom : 0;
        if (dist < bestDist) {
          best = r;
          bestDist = dist;
        }
      }
      this.selectRows(best && bestDist <= CLICK_SLACK ? [best] : []);
    });
  }

  private selectRows(rows: Row[]): void {
    if (rows.length === 0) {
      this.clearBand();
      return;
    }
    const low = Math.min(...rows.map((r) => r.low));
    const high = Math.max(...rows.map((r) => r.high));
    this.band = { low, high, drawLow: Math.min(...rows.map((r) => lowOf(r))) };
    this.plot?.redraw(false, false);
    this.showBandMenu();
  }

  clearBand(): void {
    this.band = null;
    this.bandEl.hidden = true;
    this.bandEl.replaceChildren();
    delete this.el.dataset.bandLow;
    delete this.el.dataset.bandHigh;
    this.plot?.redraw(false, false);
  }

  /** The band as a range filter: low inclusive, high exclusive, open at the top past exact integers. */
  private bandRange(): NumRange | null {
    if (!this.band) return null;
    return { low: this.band.low, high: this.band.high > MAX_EXACT ? null : this.band.high };
  }

  private showBandMenu(): void {
    const range = this.bandRange();
    const dim = this.spec.breakdown;
    if (!range || !dim) return;
    const text = rangeText(range, this.unit);
    const inBand = this.rows.filter((r) => r.low >= range.low! && (range.high === null || r.high <= range.high));
    const seconds = this.points.reduce((s, p) => s + p.seconds, 0);
    const count = inBand.reduce((s, r) => s + r.count, 0);
    const go = (by: string) => this.host.drill(this, drillBand(this.spec, dim, range, by));
    const dims = bandDimensions(this.spec, this.host.catalog);
    this.bandEl.hidden = false;
    this.bandEl.dataset.dim = dim;
    this.bandEl.dataset.low = String(this.band!.low);
    this.bandEl.dataset.high = String(this.band!.high);
    this.bandEl.dataset.range = formatRange(range);
    this.el.dataset.bandLow = String(this.band!.low);
    this.el.dataset.bandHigh = String(this.band!.high);
    replace(
      this.bandEl,
      h('span', { class: 'band-title', 'data-test': 'band-title' }, `Drill down: ${text}`),
      seconds ? h('span', { class: 'dim' }, `${this.stat.format.value(this.rate(count, seconds))} on average`) : null,
      h('button', { 'data-test': 'band-zoom', title: `A heatmap of the ${dim} band ${text} alone`, onclick: () => go(dim) }, 'Zoom into band'),
      dims.map((d) =>
        h(
          'button',
          { 'data-test': 'band-drill', 'data-dim': d.name, title: `The events with ${dim} ${text}, by ${d.name}`, onclick: () => go(d.name) },
          `by ${d.name}${d.numeric ? ' (heatmap)' : ''}`,
        ),
      ),
      h('button', { class: 'link-button', 'data-test': 'band-clear', onclick: () => this.clearBand() }, 'clear'),
    );
  }

  protected cursorMoved(u: uPlot): void {
    const top = u.cursor.top;
    this.cursorTop = top === undefined || top < 0 ? null : top;
    this.updateSide();
  }

  protected selectionChanged(): void {
    this.updateSide();
  }

  private updateSide(): void {
    const fmt = (v: number) => fmtBound(v, this.unit);
    const rateFmt = this.stat.format.value;
    // At the cursor: the bucket under it.
    const t = this.cursorIdx !== null ? this.xs[this.cursorIdx] : undefined;
    if (t !== undefined && this.plot) {
      const p = this.byT.get(t);
      const v = this.cursorTop !== null ? this.plot.posToVal(this.cursorTop, 'y') : NaN;
      const b = p?.buckets?.find((x) => v >= lowOf(x) && v < x.high);
      replace(
        this.readout,
        h('div', { class: 'legend-mode' }, `at ${fmtClock(t)}`),
        h('div', null, 'all: ', h('b', null, p ? rateFmt(this.rate(p.total, p.seconds)) : 'no data')),
        Number.isFinite(v)
          ? h('div', null, `${fmt(b ? lowOf(b) : v)}${b ? ` \u2013 ${fmt(b.high)}` : ''}: `, h('b', null, b ? rateFmt(this.rate(b.count, p!.seconds)) : '0'))
          : null,
      );
    } else {
      replace(this.readout, h('div', { class: 'legend-mode dim' }, 'Point at a cell to read it.'));
    }
    // Over the selection or the window: the rate and percentiles.
    let pts = this.points;
    let label = `over ${this.range ? fmtDuration(this.range.span) : 'the window'}`;
    if (this.selection) {
      const { t0, t1 } = this.selection;
      pts = pts.filter((p) => p.t >= t0 && p.t <= t1);
      label = 'over the selection';
    }
    const seconds = pts.reduce((s, p) => s + p.seconds, 0);
    const total = pts.reduce((s, p) => s + p.total, 0);
    const q = percentiles(pts, PERCENTILES);
    replace(
      this.stats,
      h('div', { class: 'legend-mode' }, label),
      h('table', { class: 'heat-table' },
        h('tr', null, h('th', null, 'average'), h('td', null, seconds ? rateFmt(this.rate(total, seconds)) : 'no data')),
        PERCENTILES.map((pc, i) => h('tr', null, h('th', null, `p${pc}`), h('td', { 'data-test': `heat-p${pc}` }, q[i] === null ? '-' : `\u2264 ${fmt(q[i]!)}`))),
        h('tr', null, h('th', null, 'cells'), h('td', { 'data-test': 'heat-cells' }, String(this.cells))),
      ),
    );
  }

  private drawScale(): void {
    const steps = 24;
    const bar = h('div', { class: 'heat-bar' });
    for (let i = 0; i < steps; i++) bar.appendChild(h('span', { style: `background:${rampColor(0.08 + (0.92 * i) / (steps - 1))}` }));
    const top = this.maxRate > 0 ? this.stat.format.value(this.maxRate / this.stat.divisor) : '-';
    replace(this.scale, bar, h('div', { class: 'heat-bar-labels dim' }, h('span', null, 'few'), h('span', null, `${top} per cell`)));
  }
}

function round1(v: number): number {
  return Math.round(v * 10) / 10;
}

/** A bucket's lower bound on a log axis (a bucket starting at 0 is drawn from a tenth of its top). */
function lowOf(b: { low: number; high: number }): number {
  return b.low > 0 ? b.low : b.high / 10;
}

/** Upper bounds of the buckets holding each percentile of the events, or null without events. */
function percentiles(points: api.Point[], ps: number[]): (number | null)[] {
  const sums = new Map<number, { high: number; count: number }>();
  let total = 0;
  for (const p of points) {
    for (const b of p.buckets ?? []) {
      const s = sums.get(b.low) ?? { high: b.high, count: 0 };
      s.count += b.count;
      sums.set(b.low, s);
      total += b.count;
    }
  }
  if (total === 0) return ps.map(() => null);
  const sorted = [...sums.entries()].sort((a, b) => a[0] - b[0]);
  return ps.map((pc) => {
    const want = (pc / 100) * total;
    let acc = 0;
    for (const [, s] of sorted) {
      acc += s.count;
      if (acc >= want) return s.high;
    }
    return sorted[sorted.length - 1][1].high;
  });
}
