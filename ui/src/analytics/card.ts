// What every worksheet chart shares: the card around it (title, filters, the
// current value, move up and down, remove), fetching through a SeriesCache
// (enabling the dataset again if the daemon forgot it), the uPlot options common
// to all charts (one time axis, a cursor synced across the worksheet, drag to
// select a range), the shading of time before the dataset existed, and the range
// summary panel with the average, minimum and maximum the daemon computes for the
// selected range (a total only for counted events: a gauge's levels are never
// summed) and Zoom, which makes the selected range the worksheet's window.

import uPlot from 'uplot';
import * as api from '../api';
import { h, replace } from '../dom';
import { fmtBound, fmtClock, fmtDateTime, fmtDuration } from '../format';
import { messageOf } from '../widgets';
import type { Catalog, StatInfo } from './catalog';
import { parseRange, parseSpec, specTitle, type NumRange, type Spec } from './dataset';
import { SeriesCache } from './series';
import type { Range } from './timewindow';

export interface CardHost {
  readonly catalog: Catalog;
  /** Charts with the same key move their cursors together. */
  readonly syncKey: string;
  remove(card: Card): void;
  drill(from: Card, to: Spec): void;
  /** Moves a card one place up (-1) or down (1) on the worksheet. */
  move(card: Card, dir: -1 | 1): void;
  /** Makes [t0, t1] (inclusive) the worksheet's window, paused. */
  zoomTo(t0: number, t1: number): void;
}

/** Width of every chart's value axis, so the time axes of a worksheet line up. */
export const Y_AXIS_SIZE = 72;

const AXIS_FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

export const axisStyle = {
  stroke: '#59636e',
  font: AXIS_FONT,
  grid: { stroke: '#e9ecef', width: 1 },
  ticks: { stroke: '#d5dae0', width: 1, size: 4 },
};

export abstract class Card {
  readonly el: HTMLElement;
  readonly spec: Spec;
  readonly stat: StatInfo;
  readonly cache: SeriesCache;
  protected plot: uPlot | null = null;
  protected readonly plotEl: HTMLElement;
  protected readonly side: HTMLElement;
  protected range: Range | null = null;
  protected selection: { t0: number; t1: number } | null = null;
  /** The index under the cursor (ours or a synced chart's), null when away. */
  protected cursorIdx: number | null = null;
  protected xs: number[] = [];
  private readonly noteEl: HTMLElement;
  private readonly errorEl: HTMLElement;
  private readonly nowEl: HTMLElement;
  private readonly summaryEl: HTMLElement;
  /** Buttons a kind of chart adds to the header (before move and remove). */
  protected readonly toolsEl: HTMLElement;
  private readonly upBtn: HTMLButtonElement;
  private readonly downBtn: HTMLButtonElement;
  private enabledAgain = false;
  private summarySeq = 0;

  constructor(
    readonly name: string,
    protected readonly host: CardHost,
    kind: 'breakdown' | 'heatmap',
  ) {
    this.spec = parseSpec(name);
    this.stat = host.catalog.get(this.spec.statistic);
    this.cache = new SeriesCache(name);
    const chips = this.spec.filters.map(([d, v]) => {
      const range = parseRange(v);
      const shown = range ? rangeText(range, host.catalog.dimension(this.spec.statistic, d)?.unit ?? null) : `= ${v}`;
      return h('span', { class: 'chip', title: `${d} ${shown}`, 'data-dim': d, 'data-value': v }, h('span', { class: 'chip-dim' }, d), ' ', shown);
    });
    this.nowEl = h('div', { class: 'chart-now', 'data-test': 'chart-now', title: 'the newest second' });
    this.noteEl = h('div', { class: 'chart-note', 'data-test': 'chart-note', hidden: true });
    this.errorEl = h('div', { class: 'error-line', 'data-test': 'chart-error', hidden: true });
    this.plotEl = h('div', { class: 'chart-plot' });
    this.side = h('aside', { class: 'chart-side' });
    this.summaryEl = h('div', { class: 'range-summary', 'data-test': 'range-summary', hidden: true });
    this.toolsEl = h('div', { class: 'chart-tools' });
    this.upBtn = h('button', { class: 'icon move', title: 'Move this chart up', 'data-test': 'card-up', onclick: () => host.move(this, -1) }, '\u25b2');
    this.downBtn = h('button', { class: 'icon move', title: 'Move this chart down', 'data-test': 'card-down', onclick: () => host.move(this, 1) }, '\u25bc');
    this.el = h(
      'section',
      { class: `chart-card ${kind}`, 'data-test': 'chart', 'data-dataset': name, 'data-kind': kind },
      h(
        'header',
        { class: 'chart-head' },
        h(
          'div',
          { class: 'chart-title' },
          h('span', { class: 'title', title: specTitle(this.spec, host.catalog) }, this.stat.description),
          this.spec.breakdown ? h('span', { class: 'by' }, 'by ', h('b', null, this.spec.breakdown)) : null,
          chips.length ? h('span', { class: 'chips' }, chips) : null,
          h('code', { class: 'ds-name', title: 'dataset name' }, name),
        ),
        this.nowEl,
        this.toolsEl,
        this.upBtn,
        this.downBtn,
        h('button', { class: 'icon', title: 'Remove this chart', 'data-test': 'chart-remove', onclick: () => host.remove(this) }, '\u00d7'),
      ),
      this.noteEl,
      this.errorEl,
      h('div', { class: 'chart-main' }, this.plotEl, this.side),
      this.summaryEl,
    );
  }

  /** Fetches what the window needs and redraws. */
  async refresh(r: Range): Promise<void> {
    this.range = r;
    try {
      await this.cache.fetch(r);
      this.showError(null);
    } catch (e) {
      if (e instanceof api.ApiError && e.status === 404 && !this.enabledAgain) {
        // The daemon no longer has this dataset (restarted, or removed elsewhere): enable it again.
        this.enabledAgain = true;
        try {
          await api.enableDataset(this.name);
          this.cache.reset();
          await this.cache.fetch(r);
          this.showError(null);
        } catch (e2) {
          this.showError(e2);
        }
      } else {
        this.showError(e);
      }
    }
    this.draw(r);
    this.updateHeader(r);
    this.markDrawn(r);
  }

  /** What was drawn, for tests and scripts: the time axis and the first and last point on it. */
  private markDrawn(r: Range): void {
    const pts = this.cache.inRange(r);
    const d = this.el.dataset;
    d.xStart = String(r.start);
    d.xEnd = String(r.end);
    d.points = String(pts.length);
    d.first = pts.length ? String(pts[0].t) : '';
    d.last = pts.length ? String(pts[pts.length - 1].t) : '';
  }

  /** Whether the buttons can move this card up and down (not the first up, not the last down). */
  setMovable(up: boolean, down: boolean): void {
    this.upBtn.disabled = !up;
    this.downBtn.disabled = !down;
  }

  /** A level read each second rather than a count of events: averaged over time, never summed. */
  get gauge(): boolean {
    return this.cache.info?.gauge ?? this.stat.kind === 'gauge';
  }

  protected abstract draw(r: Range): void;

  /** Redraws at the card's current width. */
  resize(): void {
    if (this.plot) this.plot.setSize({ width: this.plotWidth(), height: this.plot.height });
    if (this.plot) this.applySelection(this.plot);
  }

  dispose(): void {
    this.plot?.destroy();
    this.plot = null;
  }

  protected plotWidth(): number {
    return Math.max(300, this.plotEl.clientWidth || 800);
  }

  /** The shown value of a point: total / seconds / divisor. */
  protected rate(count: number, seconds: number): number {
    return count / Math.max(1, seconds) / this.stat.divisor;
  }

  protected showError(e: unknown): void {
    if (e === null) {
      this.errorEl.hidden = true;
      return;
    }
    this.errorEl.hidden = false;
    this.errorEl.textContent = messageOf(e);
  }

  private updateHeader(r: Range): void {
    const since = this.cache.info?.since ?? 0;
    if (since > r.start) {
      this.noteEl.hidden = false;
      this.noteEl.textContent =
        since > r.end
          ? `Recording from ${fmtClock(since)}: this dataset was just enabled and counts from the next whole second.`
          : `No data before ${since - r.start > 86400 ? fmtDateTime(since) : fmtClock(since)}, when this dataset was enabled (shaded).`;
    } else {
      this.noteEl.hidden = true;
    }
    const pts = this.cache.inRange(r);
    const last = pts[pts.length - 1];
    this.nowEl.textContent = last ? this.stat.format.value(this.rate(last.total, last.seconds)) : '';
    this.nowEl.title = last ? `at ${fmtClock(last.t)}${last.seconds > 1 ? ` (${fmtDuration(last.seconds)} average)` : ''}` : '';
  }

  /** uPlot options every chart of a worksheet shares; cards add series, y scale and hooks. */
  protected baseOptions(height: number): uPlot.Options {
    return {
      width: this.plotWidth(),
      height,
      legend: { show: false },
      padding: [8, 8, 0, 0],
      cursor: {
        sync: {
          key: this.host.syncKey,
          setSeries: false,
          // Cursors move together; a drag selects in its own chart only.
          filters: { pub: (type) => type !== 'mousedown' && type !== 'mouseup' },
        },
        drag: { x: true, y: false, setScale: false, dist: 3 },
        points: { show: false },
        y: false,
      },
      select: { show: true, left: 0, top: 0, width: 0, height: 0 },
      scales: {
        x: {
          time: true,
          auto: false,
          range: () => (this.range ? [this.range.start, this.range.end] : [0, 1]),
        },
      },
      series: [{}],
      axes: [{ ...axisStyle, space: 64, values: timeTicks }, { ...axisStyle, size: Y_AXIS_SIZE }],
      hooks: {
        setSelect: [(u) => this.onSelectBox(u)],
        setCursor: [
          (u) => {
            const c = u.cursor;
            const away = c.left === undefined || c.left < 0 || c.idx === null || c.idx === undefined;
            this.cursorIdx = away ? null : (c.idx as number);
            this.cursorMoved(u);
          },
        ],
        drawClear: [(u) => this.shadeNoData(u)],
      },
    };
  }

  /** The cursor moved (legends and readouts follow it). */
  protected cursorMoved(_u: uPlot): void {}

  /** The selection changed (legends may show its average). */
  protected selectionChanged(): void {}

  /** Time before the dataset existed is hatched, so an empty start is not mistaken for idleness. */
  private shadeNoData(u: uPlot): void {
    const since = this.cache.info?.since;
    const r = this.range;
    if (!since || !r || since <= r.start) return;
    const x0 = u.valToPos(r.start, 'x', true);
    const x1 = u.valToPos(Math.min(since, r.end + r.step), 'x', true);
    const { top, height } = u.bbox;
    const ctx = u.ctx;
    ctx.save();
    ctx.fillStyle = hatch(ctx);
    ctx.fillRect(x0, top, Math.max(0, x1 - x0), height);
    ctx.restore();
  }

  // --- range selection ----------------------------------------------------------

  /** uPlot's selection box changed; charts that also select along y take theirs first. */
  protected onSelectBox(u: uPlot): void {
    this.onSelect(u);
  }

  protected onSelect(u: uPlot): void {
    const r = this.range;
    if (!r) return;
    const sel = u.select;
    if (sel.width < 3) {
      if (this.selection) this.clearSelection();
      return;
    }
    let t0 = Math.round(u.posToVal(sel.left, 'x'));
    let t1 = Math.round(u.posToVal(sel.left + sel.width, 'x'));
    t0 = Math.max(r.start, Math.floor(t0 / r.step) * r.step);
    t1 = Math.min(r.end, Math.floor(t1 / r.step) * r.step + r.step - 1);
    if (t1 < t0) return;
    this.selection = { t0, t1 };
    this.selectionChanged();
    void this.loadSummary();
  }

  clearSelection(): void {
    this.selection = null;
    this.summarySeq++;
    this.summaryEl.hidden = true;
    this.plot?.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
    this.selectionChanged();
  }

  /** Puts the selection box back where its times are after the window moved. */
  protected applySelection(u: uPlot): void {
    if (!this.selection) return;
    const left = Math.max(0, u.valToPos(this.selection.t0, 'x'));
    const right = Math.min(u.over.clientWidth, u.valToPos(this.selection.t1 + 1, 'x'));
    const width = right > left ? right - left : 0;
    u.setSelect({ left, top: 0, width, height: u.over.clientHeight }, false);
  }

  private async loadSummary(): Promise<void> {
    const sel = this.selection;
    if (!sel) return;
    const seq = ++this.summarySeq;
    const label = `${fmtClock(sel.t0)} \u2013 ${fmtClock(sel.t1 + 1)} (${fmtDuration(sel.t1 - sel.t0 + 1)})`;
    const clear = h(
      'span',
      { class: 'range-actions' },
      h(
        'button',
        { class: 'link-button', 'data-test': 'range-zoom', title: 'Show exactly this range on every chart of the worksheet (paused)', onclick: () => this.host.zoomTo(sel.t0, sel.t1) },
        'Zoom',
      ),
      h('button', { class: 'link-button', 'data-test': 'range-clear', onclick: () => this.clearSelection() }, 'clear'),
    );
    this.summaryEl.hidden = false;
    this.summaryEl.dataset.state = 'loading';
    replace(this.summaryEl, h('span', { class: 'range-label' }, 'Selected ', label), h('span', { class: 'dim' }, 'computing\u2026'), clear);
    try {
      const s = await api.data({ name: this.name, start: sel.t0, end: sel.t1 });
      if (seq !== this.summarySeq) return;
      const fmt = this.stat.format.value;
      const d = this.stat.divisor;
      const stat = (title: string, cls: string, v: number) =>
        h('span', { class: 'range-stat' }, `${title} `, h('b', { class: cls, 'data-test': cls, 'data-value': String(v) }, fmt(v)));
      const per = s.resolution === 'second' ? 'per second' : `from per-${s.resolution} averages`;
      this.summaryEl.dataset.state = 'ready';
      this.summaryEl.dataset.start = String(sel.t0);
      this.summaryEl.dataset.end = String(sel.t1);
      replace(
        this.summaryEl,
        h('span', { class: 'range-label' }, 'Selected ', label),
        stat('average', 'range-avg', s.summary.average / d),
        stat('minimum', 'range-min', s.summary.min / d),
        stat('maximum', 'range-max', s.summary.max / d),
        !this.gauge ? h('span', { class: 'range-stat' }, 'total ', h('b', { class: 'range-total', 'data-test': 'range-total', 'data-value': String(s.summary.total / d) }, this.stat.format.tick(s.summary.total / d)), ` ${this.stat.unit}`) : null,
        h('span', { class: 'dim' }, `${per}, ${fmtDuration(s.summary.seconds)} of data`),
        clear,
      );
    } catch (e) {
      if (seq !== this.summarySeq) return;
      this.summaryEl.dataset.state = 'error';
      replace(this.summaryEl, h('span', { class: 'range-label' }, 'Selected ', label), h('span', { class: 'error-text' }, messageOf(e)), clear);
    }
  }
}

/** A range filter as read: "100 µs – 200 µs", "≥ 10 ms", "< 4 KB". */
export function rangeText(r: NumRange, unit: string | null): string {
  const f = (v: number) => fmtBound(v, unit);
  if (r.low !== null && r.high !== null) return `${f(r.low)} \u2013 ${f(r.high)}`;
  if (r.low !== null) return `\u2265 ${f(r.low)}`;
  if (r.high !== null) return `< ${f(r.high)}`;
  return 'any';
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** Time axis labels in 24-hour local time, as fine as the tick spacing needs. */
function timeTicks(_u: uPlot, splits: number[], _axis: number, _space: number, incr: number): string[] {
  return splits.map((t) => {
    const d = new Date(t * 1000);
    const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
    if (incr < 60) return `${hm}:${pad2(d.getSeconds())}`;
    if (incr < 86400) return d.getHours() === 0 && d.getMinutes() === 0 ? `${MONTHS[d.getMonth()]} ${d.getDate()}` : hm;
    return `${MONTHS[d.getMonth()]} ${d.getDate()}`;
  });
}

let hatchPattern: CanvasPattern | null = null;

function hatch(ctx: CanvasRenderingContext2D): CanvasPattern | string {
  if (hatchPattern) return hatchPattern;
  const c = document.createElement('canvas');
  c.width = c.height = 8;
  const g = c.getContext('2d');
  if (!g) return '#f1f3f5';
  g.fillStyle = '#f6f7f9';
  g.fillRect(0, 0, 8, 8);
  g.strokeStyle = '#e1e5ea';
  g.lineWidth = 1.5;
  g.beginPath();
  g.moveTo(0, 8);
  g.lineTo(8, 0);
  g.stroke();
  hatchPattern = ctx.createPattern(c, 'repeat');
  return hatchPattern ?? '#f1f3f5';
}
