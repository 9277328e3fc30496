// Charts of datasets without a breakdown or with a categorical one (op, client,
// file, ...): the largest values plus the rest, as stacked areas or as lines (a
// toggle per chart: stacked by default for counted events, lines for gauges
// except those whose values add up to a whole, like CPU modes), and a legend
// listing every value at the cursor, or averaged over the selected range or the
// window. Clicking a value opens the drill-down menu: keep only that value and
// break down by another dimension of the statistic.

import uPlot from 'uplot';
import type * as api from '../api';
import { h, replace } from '../dom';
import { fmtClock, fmtDuration } from '../format';
import { Card, type CardHost } from './card';
import { cannotFilter, drill, drillDimensions } from './dataset';
import type { Range } from './timewindow';

/** Values drawn as their own area; the rest are summed into one. */
const MAX_SERIES = 8;
/** Rows in the legend; the rest are counted below it. */
const MAX_ROWS = 40;
const REST = '(other keys)';
const TOTAL = 'total';

/** Gauges whose values at one moment add up to a meaningful whole: stacked by default. */
const STACKED_GAUGES = new Set(['cpu.utilization']);

/** Stacked or lines as the user chose per dataset, for as long as the tab is open. */
const stackChoice = new Map<string, boolean>();

const PALETTE = ['#2f6fb5', '#e8862a', '#4f9d4a', '#d04a4a', '#8a63b8', '#1aa3b0', '#b5a21a', '#c0639d', '#7d6450', '#5e7fa0'];
const REST_COLOR = '#a7afb8';

export class BreakdownCard extends Card {
  private readonly colors = new Map<string, string>();
  /** Keys with an area, in drawing order; REST last when present. */
  private charted: string[] = [];
  private signature = '';
  private points: api.Point[] = [];
  private byT = new Map<number, api.Point>();
  private readonly legendHead: HTMLElement;
  private readonly legendBody: HTMLElement;
  private readonly legendFoot: HTMLElement;
  private readonly rows = new Map<string, HTMLElement>();
  private stacked: boolean;
  private readonly stackBtn: HTMLButtonElement | null = null;

  constructor(name: string, host: CardHost) {
    super(name, host, 'breakdown');
    this.stacked = stackChoice.get(name) ?? (this.stat.kind !== 'gauge' || STACKED_GAUGES.has(this.spec.statistic));
    if (this.spec.breakdown) {
      this.stackBtn = h('button', { class: 'seg-toggle', 'data-test': 'card-stacked', onclick: () => this.setStacked(!this.stacked) });
      this.toolsEl.appendChild(this.stackBtn);
      this.showStacked();
    }
    this.legendHead = h('div', { class: 'legend-head' });
    this.legendBody = h('div', { class: 'legend-rows', 'data-test': 'legend' });
    this.legendFoot = h('div', { class: 'legend-foot dim' });
    replace(this.side, this.legendHead, this.legendBody, this.legendFoot);
  }

  protected draw(r: Range): void {
    this.points = this.cache.inRange(r);
    this.byT = new Map(this.points.map((p) => [p.t, p]));
    const n = Math.floor((r.end - r.start) / r.step) + 1;
    this.xs = Array.from({ length: n }, (_, i) => r.start + i * r.step);

    const charted = this.chooseSeries();
    const values = charted.map(() => new Array<number | null>(n).fill(null));
    for (let i = 0; i < n; i++) {
      const p = this.byT.get(this.xs[i]);
      if (!p) continue;
      if (!this.spec.breakdown) {
        values[0][i] = this.rate(p.total, p.seconds);
        continue;
      }
      const counts = new Map((p.breakdown ?? []).map((kc) => [kc.key, kc.count]));
      let shown = 0;
      charted.forEach((key, j) => {
        if (key === REST) return;
        const c = counts.get(key) ?? 0;
        shown += c;
        values[j][i] = this.rate(c, p.seconds);
      });
      const restAt = charted.indexOf(REST);
      if (restAt >= 0) values[restAt][i] = this.rate(Math.max(0, p.total - shown), p.seconds);
    }
    // Stacked: each area is drawn at the running sum of the ones below it.
    const drawn = values.map((v) => v.slice());
    if (this.stacked) {
      for (let j = 1; j < drawn.length; j++) {
        for (let i = 0; i < n; i++) {
          const below = drawn[j - 1][i];
          const own = drawn[j][i];
          drawn[j][i] = own === null ? below : (below ?? 0) + own;
        }
      }
    }
    const data: uPlot.AlignedData = [this.xs, ...drawn];

    const signature = `${this.stacked ? 'stacked' : 'lines'}\u0000${charted.join('\u0000')}`;
    if (!this.plot || signature !== this.signature) {
      this.plot?.destroy();
      this.signature = signature;
      this.charted = charted;
      this.plot = new uPlot(this.options(), data, this.plotEl);
    } else {
      this.plot.setData(data, true);
    }
    this.applySelection(this.plot);
    this.updateLegend();
  }

  private setStacked(on: boolean): void {
    this.stacked = on;
    stackChoice.set(this.name, on);
    this.showStacked();
    if (this.range) this.draw(this.range);
  }

  private showStacked(): void {
    const b = this.stackBtn;
    if (!b) return;
    b.textContent = this.stacked ? 'stacked' : 'lines';
    b.title = this.stacked ? 'Drawn as stacked areas: click to draw each value as its own line' : 'Drawn as lines: click to stack the values';
    b.dataset.stacked = String(this.stacked);
    b.setAttribute('aria-pressed', String(this.stacked));
    b.classList.toggle('on', this.stacked);
    this.el.dataset.stacked = String(this.stacked);
  }

  /** The keys that get an area: the largest over the window, in a stable order. */
  private chooseSeries(): string[] {
    if (!this.spec.breakdown) {
      this.colors.set(TOTAL, PALETTE[0]);
      return [TOTAL];
    }
    const totals = this.keyTotals(this.points);
    const ranked = [...totals.entries()].filter(([, c]) => c > 0).sort((a, b) => b[1] - a[1]).map(([k]) => k);
    const top = ranked.slice(0, MAX_SERIES);
    for (const k of top) if (!this.colors.has(k)) this.colors.set(k, PALETTE[this.colors.size % PALETTE.length]);
    // Colour order is first-seen order: areas keep their place as ranks change.
    const order = [...this.colors.keys()];
    top.sort((a, b) => order.indexOf(a) - order.indexOf(b));
    if (ranked.length > MAX_SERIES) top.push(REST);
    return top;
  }

  private keyTotals(points: api.Point[]): Map<string, number> {
    const totals = new Map<string, number>();
    for (const p of points) for (const kc of p.breakdown ?? []) totals.set(kc.key, (totals.get(kc.key) ?? 0) + kc.count);
    return totals;
  }

  private colorOf(key: string): string {
    if (key === REST) return REST_COLOR;
    return this.colors.get(key) ?? REST_COLOR;
  }

  private options(): uPlot.Options {
    const o = this.baseOptions(170);
    const fmt = this.stat.format;
    o.series = [
      {},
      ...this.charted.map((key) => {
        const c = this.colorOf(key);
        return this.stacked
          ? { label: key, stroke: c, width: 1.25, fill: `${c}55`, points: { show: false }, spanGaps: false }
          : { label: key, stroke: c, width: 1.5, points: { show: false }, spanGaps: false };
      }),
    ];
    if (this.stacked) o.bands = this.charted.slice(1).map((_, j) => ({ series: [j + 2, j + 1] as [number, number] }));
    o.scales = {
      ...o.scales,
      y: { auto: true, range: (_u, _min, max) => [0, max > 0 ? max * 1.08 : 1] },
    };
    o.axes = [o.axes![0], { ...o.axes![1], values: (_u, splits) => splits.map((v) => fmt.tick(v)) }];
    return o;
  }

  protected cursorMoved(): void {
    this.updateLegend();
  }

  protected selectionChanged(): void {
    this.updateLegend();
  }

  /** Values per key at the cursor, else over the selection, else over the window. */
  private updateLegend(): void {
    let pts: api.Point[];
    let label: string;
    const t = this.cursorIdx !== null ? this.xs[this.cursorIdx] : undefined;
    if (t !== undefined) {
      const p = this.byT.get(t);
      pts = p ? [p] : [];
      label = `at ${fmtClock(t)}${this.range && this.range.step > 1 ? ` (${fmtDuration(this.range.step)} average)` : ''}`;
    } else if (this.selection) {
      const { t0, t1 } = this.selection;
      pts = this.points.filter((p) => p.t >= t0 && p.t <= t1);
      label = `average over the selection`;
    } else {
      pts = this.points;
      label = `average over ${this.range ? fmtDuration(this.range.span) : 'the window'}`;
    }
    const seconds = pts.reduce((s, p) => s + p.seconds, 0);
    const total = pts.reduce((s, p) => s + p.total, 0);
    const fmt = this.stat.format.value;
    const totalText = seconds ? fmt(this.rate(total, seconds)) : 'no data';
    replace(this.legendHead, h('span', { class: 'legend-mode', 'data-test': 'legend-mode' }, label), h('span', { class: 'legend-total', title: 'total' }, totalText));

    if (!this.spec.breakdown) {
      this.legendBody.replaceChildren(
        this.row(TOTAL, seconds ? this.rate(total, seconds) : null, 'all operations counted', false),
      );
      this.legendFoot.textContent = 'Not broken down. Add the statistic again with a breakdown to drill down.';
      return;
    }
    const ranked = [...this.keyTotals(pts).entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const rows = ranked.slice(0, MAX_ROWS).map(([key, c]) => this.row(key, this.rate(c, seconds), undefined, true));
    this.legendBody.replaceChildren(...rows);
    if (ranked.length === 0) {
      this.legendBody.replaceChildren(h('div', { class: 'legend-empty dim' }, seconds ? 'no activity' : 'no data yet'));
    }
    this.legendFoot.textContent =
      ranked.length > MAX_ROWS ? `${ranked.length - MAX_ROWS} more values not listed` : ranked.length ? 'Click a value to drill down.' : '';
  }

  private row(key: string, value: number | null, title: string | undefined, drillable: boolean): HTMLElement {
    let el = this.rows.get(key);
    if (!el) {
      el = h('div', { class: 'legend-row', 'data-test': 'legend-key', 'data-key': key, title: title ?? key, tabindex: drillable ? 0 : undefined });
      if (drillable) {
        const open = (e: Event) => this.openDrillMenu(key, el!, e);
        el.addEventListener('click', open);
        el.addEventListener('keydown', (e) => {
          if (e.key === 'Enter') open(e);
        });
      }
      this.rows.set(key, el);
    }
    const charted = this.charted.includes(key);
    const color = charted ? this.colorOf(key) : 'transparent';
    replace(
      el,
      h('span', { class: `swatch${charted ? '' : ' off'}`, style: `background:${color}` }),
      h('span', { class: 'legend-key' }, shortKey(key)),
      h('span', { class: 'legend-value', 'data-value': value === null ? '' : String(value) }, value === null ? '-' : this.stat.format.value(value)),
    );
    el.classList.toggle('drillable', drillable);
    return el;
  }

  private openDrillMenu(key: string, anchor: HTMLElement, e: Event): void {
    e.stopPropagation();
    closeMenus();
    const why = cannotFilter(key);
    const dims = drillDimensions(this.spec, this.host.catalog);
    const item = (label: string, test: string, by: string | null) =>
      h(
        'button',
        {
          class: 'menu-item',
          'data-test': test,
          onclick: () => {
            closeMenus();
            this.host.drill(this, drill(this.spec, key, by));
          },
        },
        label,
      );
    const menu = h(
      'div',
      { class: 'menu', 'data-test': 'drill-menu', role: 'menu' },
      h('div', { class: 'menu-title' }, h('span', { class: 'dim' }, `${this.spec.breakdown} = `), key),
      why
        ? h('div', { class: 'menu-note' }, why)
        : [
            dims.map((d) => item(`Drill down by ${d.name}${d.numeric ? ' (heatmap)' : ''}`, `drill-${d.name}`, d.name)),
            item(`Only this ${this.spec.breakdown}, not broken down`, 'drill-none', null),
          ],
    );
    document.body.appendChild(menu);
    const box = anchor.getBoundingClientRect();
    const left = Math.min(box.left, window.innerWidth - menu.offsetWidth - 8);
    const top = box.bottom + menu.offsetHeight > window.innerHeight ? box.top - menu.offsetHeight : box.bottom;
    menu.style.left = `${Math.max(8, left + window.scrollX)}px`;
    menu.style.top = `${Math.max(8, top + window.scrollY)}px`;
    setTimeout(() => {
      document.addEventListener('mousedown', onOutside);
      document.addEventListener('keydown', onEscape);
    });
    function onOutside(ev: MouseEvent) {
      if (!menu.contains(ev.target as Node)) closeMenus();
    }
    function onEscape(ev: KeyboardEvent) {
      if (ev.key === 'Escape') closeMenus();
    }
    menuCleanup = () => {
      document.removeEventListener('mousedown', onOutside);
      document.removeEventListener('keydown', onEscape);
      menu.remove();
    };
  }

  dispose(): void {
    closeMenus();
    super.dispose();
  }
}

/** Long values (file paths) keep their end, which is what tells them apart. */
function shortKey(key: string): string {
  return key.length > 38 ? `\u2026${key.slice(-37)}` : key;
}

let menuCleanup: (() => void) | null = null;

function closeMenus(): void {
  menuCleanup?.();
  menuCleanup = null;
}
