// The Analytics page: a worksheet is a list of datasets drawn as charts one
// above the other on one time axis, in the order the worksheet saves. This module
// owns the worksheet toolbar (open, save, delete, new), "Add statistic", the time
// controls, the refresh loop (each second while live), drill-down (a new dataset
// below the chart it came from), zooming the window to a selected range, moving
// charts up and down, and removal. The unsaved worksheet a user first sees holds
// the default charts. Unsaved changes survive moving between pages for as long as
// the tab is open.

import * as api from '../api';
import { h, options, replace } from '../dom';
import type { Page } from '../page';
import { navigate, type Route } from '../router';
import { busy, confirmAction, dialog, errorLine, field, messageOf, toast } from '../widgets';
import { Card, type CardHost } from './card';
import { type Catalog, loadCatalog } from './catalog';
import { BreakdownCard } from './chart';
import { formatSpec, parseSpec, type Spec } from './dataset';
import { HeatmapCard } from './heatmap';
import { TimeWindow, timeControls } from './timewindow';

/**
 * The first worksheet: NFS operations of both versions and iSCSI commands, host CPU by mode, disk
 * operations by device, then network bytes right above disk bytes, so what
 * comes in over the wire and what goes to disk line up on one time axis.
 */
const DEFAULT_DATASETS = [
  'nfs3.ops[op]',
  'nfs4.ops[op]',
  'iscsi.ops[op]',
  'cpu.utilization[mode]',
  'io.ops[device]',
  'net.interface.bytes[direction]',
  'io.bytes[op]',
];
const NAME_RE = /^[A-Za-z0-9._-]{1,64}$/;

/** The window is the same on every worksheet and survives page changes. */
const tw = new TimeWindow();
/** Worksheets as the user left them: '' is the unsaved one. */
const drafts = new Map<string, string[]>([['', DEFAULT_DATASETS.slice()]]);
let syncSeq = 0;

export function analyticsPage(route: Route): Page {
  const wsName = route[0] ?? '';
  const err = errorLine('analytics-error');
  const select = h('select', { 'data-test': 'worksheet-select', title: 'Open a saved worksheet' });
  const saveBtn = h('button', { 'data-test': 'worksheet-save' }, 'Save\u2026');
  const deleteBtn = h('button', { class: 'danger-text', 'data-test': 'worksheet-delete', hidden: !wsName }, 'Delete');
  const newBtn = h('button', { 'data-test': 'worksheet-new', title: 'A new unsaved worksheet' }, 'New');
  const addBtn = h('button', { class: 'primary', 'data-test': 'add-stat' }, '+ Add statistic');
  const modified = h('span', { class: 'modified', 'data-test': 'worksheet-modified', hidden: true }, 'modified');
  const controls = timeControls(tw);
  const chartsEl = h('div', { class: 'charts', 'data-test': 'charts' });
  const status = h('div', { class: 'analytics-status dim', 'data-test': 'analytics-status' });
  const el = h(
    'div',
    { class: 'page analytics-page', 'data-test': 'page-analytics', 'data-worksheet': wsName },
    h(
      'div',
      { class: 'ws-bar' },
      h('div', { class: 'ws-title' }, h('h1', null, 'Analytics'), h('span', { class: 'ws-name', 'data-test': 'worksheet-name-shown' }, wsName || 'unsaved worksheet'), modified),
      h('div', { class: 'ws-tools' }, h('label', { class: 'inline' }, 'Worksheet ', select), newBtn, saveBtn, deleteBtn, addBtn),
    ),
    h('div', { class: 'ws-bar sticky' }, controls.el, status),
    err.el,
    chartsEl,
  );

  let catalog: Catalog | null = null;
  let saved: api.Worksheet[] = [];
  let cards: Card[] = [];
  let disposed = false;
  let refreshing = false;
  let pending = false;
  const host: CardHost = {
    get catalog() {
      return catalog!;
    },
    syncKey: `ws-${++syncSeq}`,
    remove: (c) => void removeCard(c),
    drill: (from, to) => void drillInto(from, to),
    move: (c, dir) => moveCard(c, dir),
    zoomTo: (t0, t1) => tw.zoomTo(t0, t1),
  };

  function names(): string[] {
    return cards.map((c) => c.name);
  }

  function updateMovable(): void {
    cards.forEach((c, i) => c.setMovable(i > 0, i < cards.length - 1));
  }

  function markModified(): void {
    updateMovable();
    if (wsName && !saved.some((w) => w.name === wsName)) return;
    drafts.set(wsName, names());
    const ws = saved.find((w) => w.name === wsName);
    modified.hidden = !wsName || !ws || JSON.stringify(ws.datasets) === JSON.stringify(names());
  }

  function makeCard(name: string): Card {
    const spec = parseSpec(name);
    const dim = spec.breakdown ? catalog!.dimension(spec.statistic, spec.breakdown) : undefined;
    return dim?.kind === 'numeric' ? new HeatmapCard(name, host) : new BreakdownCard(name, host);
  }

  function renderSelect(): void {
    const items: [string, string][] = [['', '(unsaved worksheet)'], ...saved.map((w): [string, string] => [w.name, w.name])];
    if (wsName && !saved.some((w) => w.name === wsName)) items.push([wsName, `${wsName} (not found)`]);
    select.replaceChildren(...options(items, wsName));
  }

  /** Refreshes every chart for the current window; one refresh at a time. */
  async function refresh(): Promise<void> {
    if (refreshing) {
      pending = true;
      return;
    }
    refreshing = true;
    try {
      const st = await api.analyticsStatus();
      if (st.sealed_upto) tw.setNewest(st.sealed_upto);
      status.textContent = st.events_dropped || st.events_late ? `${st.events_dropped} events dropped, ${st.events_late} late` : '';
      status.classList.toggle('warn-text', !!(st.events_dropped || st.events_late));
      const r = tw.range();
      controls.update();
      await Promise.all(cards.map((c) => c.refresh(r)));
    } catch (e) {
      if (!(e instanceof api.ApiError && e.status === 401)) err.show(e);
    } finally {
      refreshing = false;
      if (pending && !disposed) {
        pending = false;
        void refresh();
      }
    }
  }

  /** Enables a dataset and adds its chart (below `after`, else at the end); throws on failure. */
  async function addDataset(name: string, after?: Card): Promise<void> {
    const info = await api.enableDataset(name);
    if (cards.some((c) => c.name === info.name)) {
      toast(`${info.name} is already on this worksheet`);
      return;
    }
    chartsEl.querySelector(':scope > .empty')?.remove();
    const card = makeCard(info.name);
    const at = after ? cards.indexOf(after) + 1 : cards.length;
    cards.splice(at, 0, card);
    if (after) after.el.after(card.el);
    else chartsEl.appendChild(card.el);
    markModified();
    card.el.scrollIntoView({ block: 'nearest' });
    await card.refresh(tw.range());
  }

  async function drillInto(from: Card, to: Spec): Promise<void> {
    err.clear();
    const name = formatSpec(to);
    try {
      await addDataset(name, from);
    } catch (e) {
      err.show(`Cannot add ${name}: ${messageOf(e)}`);
    }
  }

  function moveCard(card: Card, dir: -1 | 1): void {
    const i = cards.indexOf(card);
    const j = i + dir;
    if (i < 0 || j < 0 || j >= cards.length) return;
    const other = cards[j];
    cards[i] = other;
    cards[j] = card;
    if (dir < 0) other.el.before(card.el);
    else other.el.after(card.el);
    markModified();
    card.el.scrollIntoView({ block: 'nearest' });
    (dir < 0 ? card.el.querySelector<HTMLElement>('[data-test=card-up]') : card.el.querySelector<HTMLElement>('[data-test=card-down]'))?.focus();
  }

  async function removeCard(card: Card): Promise<void> {
    cards = cards.filter((c) => c !== card);
    card.dispose();
    card.el.remove();
    markModified();
    // Built-in datasets stay; so do those another chart or a saved worksheet still shows.
    const name = card.name;
    const inUse = cards.some((c) => c.name === name) || saved.some((w) => w.datasets.includes(name)) || [...drafts.values()].some((d) => d.includes(name));
    if (card.cache.info?.builtin || inUse) return;
    try {
      await api.disableDataset(name);
    } catch (e) {
      if (!(e instanceof api.ApiError && (e.status === 409 || e.status === 404))) err.show(`Cannot remove ${name}: ${messageOf(e)}`);
    }
  }

  function addDialog(): void {
    if (!catalog) return;
    const stats = catalog.list();
    const derr = errorLine('dialog-error');
    const statSel = h('select', { 'data-test': 'add-stat-statistic' }, options(stats.map((s): [string, string] => [s.name, `${s.description} (${s.name})`])));
    const bdSel = h('select', { 'data-test': 'add-stat-breakdown' });
    const preview = h('code', { class: 'preview', 'data-test': 'add-stat-preview' });
    const fill = () => {
      const st = catalog!.get(statSel.value);
      const keep = bdSel.value;
      bdSel.replaceChildren(
        ...options(
          [['', 'none'], ...st.dimensions.map((d): [string, string] => [d.name, d.kind === 'numeric' ? `${d.name} (heatmap)` : d.name])],
          st.dimensions.some((d) => d.name === keep) ? keep : '',
        ),
      );
      updatePreview();
    };
    const updatePreview = () => {
      preview.textContent = formatSpec({ statistic: statSel.value, filters: [], breakdown: bdSel.value || null });
    };
    statSel.addEventListener('change', fill);
    bdSel.addEventListener('change', updatePreview);
    fill();
    const add = h('button', { class: 'primary', 'data-test': 'add-stat-submit' }, 'Add');
    const cancel = h('button', null, 'Cancel');
    const d = dialog(
      'Add statistic',
      [
        field('Statistic', statSel),
        field('Broken down by', bdSel, 'numeric dimensions are drawn as heatmaps'),
        h('div', { class: 'field' }, h('span', { class: 'field-label' }, 'Dataset'), preview),
        derr.el,
      ],
      [cancel, add],
      'add-stat-dialog',
    );
    cancel.addEventListener('click', () => d.close());
    add.addEventListener('click', async () => {
      derr.clear();
      const spec: Spec = { statistic: statSel.value, filters: [], breakdown: bdSel.value || null };
      const name = formatSpec(spec);
      if (cards.some((c) => c.name === name)) {
        derr.show(`${name} is already on this worksheet`);
        return;
      }
      try {
        await busy(add, 'Adding\u2026', () => addDataset(name));
        d.close();
      } catch (e) {
        derr.show(e);
      }
    });
  }

  function saveDialog(): void {
    const derr = errorLine('dialog-error');
    const input = h('input', { type: 'text', value: wsName, placeholder: 'e.g. nfs-clients', maxlength: 64, 'data-test': 'worksheet-name', spellcheck: false });
    const save = h('button', { class: 'primary', 'data-test': 'worksheet-save-submit' }, 'Save');
    const cancel = h('button', null, 'Cancel');
    const d = dialog('Save worksheet', [field('Name', input, 'letters, digits, - _ and ., up to 64'), derr.el], [cancel, save], 'save-dialog');
    input.select();
    cancel.addEventListener('click', () => d.close());
    const submit = async () => {
      derr.clear();
      const name = input.value.trim();
      if (!NAME_RE.test(name)) {
        derr.show('A worksheet name is 1 to 64 letters, digits, "-", "_" or "."');
        return;
      }
      try {
        const ws = await busy(save, 'Saving\u2026', () => api.saveWorksheet(name, names()));
        d.close();
        drafts.delete(name);
        if (!wsName) drafts.set('', DEFAULT_DATASETS.slice());
        toast(`Worksheet ${ws.name} saved`);
        navigate('analytics', ws.name);
      } catch (e) {
        derr.show(e instanceof api.ApiError && e.status === 404 ? `This daemon cannot keep worksheets (${e.message}).` : e);
      }
    };
    save.addEventListener('click', submit);
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') void submit();
    });
  }

  select.addEventListener('change', () => (select.value ? navigate('analytics', select.value) : navigate('analytics')));
  newBtn.addEventListener('click', () => {
    drafts.set('', DEFAULT_DATASETS.slice());
    navigate('analytics');
  });
  saveBtn.addEventListener('click', saveDialog);
  addBtn.addEventListener('click', addDialog);
  deleteBtn.addEventListener('click', () =>
    confirmAction('Delete worksheet', ['Delete the worksheet ', h('b', null, wsName), '? Its datasets keep recording until removed.'], 'Delete', async () => {
      await api.deleteWorksheet(wsName);
      drafts.delete(wsName);
      toast(`Worksheet ${wsName} deleted`);
      navigate('analytics');
    }),
  );

  const stopWindow = tw.onChange(() => {
    controls.update();
    for (const c of cards) c.clearSelection();
    void refresh();
  });
  const onResize = () => cards.forEach((c) => c.resize());
  window.addEventListener('resize', onResize);

  let timer = 0;
  const tick = () => {
    if (disposed) return;
    if (tw.live && !document.hidden) void refresh();
    timer = window.setTimeout(tick, 1000);
  };

  (async () => {
    replace(chartsEl, h('div', { class: 'loading' }, 'Loading\u2026'));
    try {
      [catalog, saved] = await Promise.all([loadCatalog(), api.worksheets()]);
    } catch (e) {
      replace(chartsEl, h('div', { class: 'error-line', 'data-test': 'error' }, messageOf(e)));
      return;
    }
    if (disposed) return;
    renderSelect();
    const ws = saved.find((w) => w.name === wsName);
    if (wsName && !ws) err.show(`There is no saved worksheet named ${wsName}.`);
    const list = drafts.get(wsName) ?? ws?.datasets ?? (wsName ? [] : DEFAULT_DATASETS.slice());
    cards = list.map(makeCard);
    replace(chartsEl, cards.map((c) => c.el));
    if (cards.length === 0) chartsEl.appendChild(h('div', { class: 'empty' }, 'This worksheet is empty: add a statistic.'));
    markModified();
    await refresh();
    tick();
  })();

  return {
    el,
    dispose() {
      disposed = true;
      clearTimeout(timer);
      stopWindow();
      window.removeEventListener('resize', onResize);
      for (const c of cards) c.dispose();
    },
  };
}
