// The worksheet's time window and its toolbar: Live (the newest sealed second at
// the right edge), Pause, Back and Forward by the window's width, zoom through
// 1 min, 10 min, 1 h, 1 day and 1 week, and zoom to a range selected on a chart
// (paused; Zoom out or Live return to the window before). The resolution follows
// the daemon's rule: seconds while the window starts within the last hour,
// minutes within the last week, hours beyond.

import type { Resolution } from '../api';
import { h } from '../dom';
import { fmtDateTime, fmtDuration, fmtClock } from '../format';

export const SPANS: { seconds: number; label: string }[] = [
  { seconds: 60, label: '1 min' },
  { seconds: 600, label: '10 min' },
  { seconds: 3600, label: '1 h' },
  { seconds: 86400, label: '1 day' },
  { seconds: 604800, label: '1 week' },
];

/** How long each resolution's history reaches back (the daemon's rings). */
const SECONDS_KEPT = 3600;
const MINUTES_KEPT = 7 * 24 * 3600;

export const STEP: Record<Resolution, number> = { second: 1, minute: 60, hour: 3600 };

/** A window to draw: [start, end] in unix seconds, start aligned to the step. */
export interface Range {
  start: number;
  end: number;
  step: number;
  resolution: Resolution;
  span: number;
}

export function resolutionFor(start: number, newest: number): Resolution {
  const back = newest - start + 1;
  if (back <= SECONDS_KEPT) return 'second';
  if (back <= MINUTES_KEPT) return 'minute';
  return 'hour';
}

export class TimeWindow {
  span = 60;
  live = true;
  /** The newest sealed second the daemon reported. */
  newest = Math.floor(Date.now() / 1000) - 3;
  /** The right edge while paused. */
  private pausedEnd = 0;
  /** The windows zoomed in from, oldest first: Zoom out returns to the last, Live to the first's width. */
  private zoomedFrom: { span: number; live: boolean; pausedEnd: number }[] = [];
  private listeners = new Set<() => void>();

  onChange(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private changed(): void {
    for (const fn of this.listeners) fn();
  }

  range(): Range {
    const end = this.live ? this.newest : Math.min(this.pausedEnd, this.newest);
    const rawStart = end - this.span + 1;
    const resolution = resolutionFor(rawStart, this.newest);
    const step = STEP[resolution];
    const start = Math.floor(rawStart / step) * step;
    return { start, end, step, resolution, span: this.span };
  }

  setNewest(t: number): void {
    this.newest = t;
  }

  pause(): void {
    if (!this.live) return;
    this.pausedEnd = this.newest;
    this.live = false;
    this.changed();
  }

  resume(): void {
    // Live after zooming into a range: follow the newest data at the width from before.
    if (this.zoomedFrom.length) this.span = this.zoomedFrom[0].span;
    this.zoomedFrom = [];
    this.live = true;
    this.changed();
  }

  /** True while the window is a range zoomed into from a chart. */
  get zoomed(): boolean {
    return this.zoomedFrom.length > 0;
  }

  /** Shows exactly [start, end] (unix seconds, inclusive), paused. */
  zoomTo(start: number, end: number): void {
    if (end < start) return;
    this.zoomedFrom.push({ span: this.span, live: this.live, pausedEnd: this.pausedEnd });
    this.live = false;
    this.span = end - start + 1;
    this.pausedEnd = end;
    this.changed();
  }

  /** Back to the window before the last zoomTo. */
  zoomOut(): void {
    const prev = this.zoomedFrom.pop();
    if (!prev) return;
    this.span = prev.span;
    this.live = prev.live;
    this.pausedEnd = prev.pausedEnd;
    this.changed();
  }

  back(): void {
    const end = this.range().end;
    this.live = false;
    this.pausedEnd = end - this.span;
    this.changed();
  }

  forward(): void {
    if (this.live) return;
    this.pausedEnd = Math.min(this.newest, this.pausedEnd + this.span);
    this.changed();
  }

  setSpan(seconds: number): void {
    if (!this.live) this.pausedEnd = this.range().end;
    this.span = seconds;
    this.zoomedFrom = [];
    this.changed();
  }

  /** The next shorter (-1) or longer (1) of SPANS; from a zoomed-in width, the nearest one that way. */
  zoom(dir: -1 | 1): void {
    const next =
      dir < 0
        ? [...SPANS].reverse().find((s) => s.seconds < this.span) ?? SPANS[0]
        : SPANS.find((s) => s.seconds > this.span) ?? SPANS[SPANS.length - 1];
    this.setSpan(next.seconds);
  }
}

/** The time toolbar; `update()` redraws its state after each refresh. */
export function timeControls(tw: TimeWindow): { el: HTMLElement; update(): void } {
  const button = (label: string, test: string, title: string, fn: () => void) =>
    h('button', { class: 'tool', 'data-test': test, title, onclick: fn }, label);
  const live = button('\u25cf Live', 'time-live', 'Follow the newest data, refreshed each second', () => tw.resume());
  const pause = button('\u275a\u275a Pause', 'time-pause', 'Stop at the current window', () => tw.pause());
  const back = button('\u25c0', 'time-back', 'Back by the width of the window', () => tw.back());
  const fwd = button('\u25b6', 'time-forward', 'Forward by the width of the window', () => tw.forward());
  const zoomIn = button('+', 'time-zoom-in', 'Zoom in (a shorter window)', () => tw.zoom(-1));
  const zoomOut = button('\u2212', 'time-zoom-out', 'Zoom out (a longer window)', () => tw.zoom(1));
  const spans = SPANS.map((s) =>
    h('button', { class: 'tool seg', 'data-test': `time-span-${s.seconds}`, onclick: () => tw.setSpan(s.seconds) }, s.label),
  );
  const zoomBack = button('\u21a9 Zoom out', 'zoom-out', 'Back to the window before zooming into a selected range', () => tw.zoomOut());
  const rangeText = h('span', { class: 'time-range', 'data-test': 'time-range' });
  const el = h(
    'div',
    { class: 'time-controls', 'data-test': 'time-controls' },
    h('div', { class: 'tool-group' }, live, pause),
    h('div', { class: 'tool-group' }, back, fwd),
    h('div', { class: 'tool-group' }, zoomOut, spans, zoomIn),
    zoomBack,
    rangeText,
  );
  const update = () => {
    const r = tw.range();
    live.classList.toggle('on', tw.live);
    pause.classList.toggle('on', !tw.live);
    fwd.disabled = tw.live;
    for (const [i, s] of SPANS.entries()) spans[i].classList.toggle('on', s.seconds === tw.span);
    const startText = tw.span >= 86400 ? fmtDateTime(r.start) : fmtClock(r.start);
    zoomBack.hidden = !tw.zoomed;
    // The end is inclusive: the window shows the seconds start ..= end.
    const state = tw.zoomed ? ' \u00b7 zoomed, paused' : tw.live ? '' : ' \u00b7 paused';
    rangeText.textContent = `${startText} \u2013 ${tw.span >= 86400 ? fmtDateTime(r.end + 1) : fmtClock(r.end + 1)} \u00b7 ${fmtDuration(tw.span)} \u00b7 per ${r.resolution}${state}`;
    for (const e of [rangeText, el]) {
      e.dataset.start = String(r.start);
      e.dataset.end = String(r.end);
      e.dataset.resolution = r.resolution;
    }
    el.dataset.live = String(tw.live);
    el.dataset.zoomed = String(tw.zoomed);
    el.dataset.span = String(tw.span);
  };
  update();
  return { el, update };
}
