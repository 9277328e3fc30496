// Shared widgets of the configuration pages: error banners, busy buttons, modal
// dialogs and confirmations, health badges, capacity bars, panels and tables.

import { h, replace, type Child } from './dom';
import { fmtBytes, fmtPercent } from './format';

/** An error line that stays hidden until it has something to say. */
export interface ErrorLine {
  el: HTMLElement;
  show(e: unknown): void;
  clear(): void;
}

export function errorLine(test = 'error'): ErrorLine {
  const el = h('div', { class: 'error-line', 'data-test': test, role: 'alert', hidden: true });
  return {
    el,
    show(e) {
      el.textContent = messageOf(e);
      el.hidden = false;
    },
    clear() {
      el.textContent = '';
      el.hidden = true;
    },
  };
}

export function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

/** Runs `work` with the button disabled and marked busy; returns its result. */
export async function busy<T>(button: HTMLButtonElement, label: string, work: () => Promise<T>): Promise<T> {
  const before = button.textContent;
  button.disabled = true;
  button.classList.add('busy');
  button.textContent = label;
  try {
    return await work();
  } finally {
    button.disabled = false;
    button.classList.remove('busy');
    button.textContent = before;
  }
}

export interface Dialog {
  el: HTMLElement;
  close(): void;
}

const openDialogs = new Set<() => void>();

/** Closes every open dialog (the page they belong to is going away). */
export function closeDialogs(): void {
  for (const close of [...openDialogs]) close();
}

/** A modal dialog; Escape and the backdrop close it. */
export function dialog(title: string, body: Child, actions: Child, test = 'dialog'): Dialog {
  const box = h(
    'div',
    { class: 'dialog', role: 'dialog', 'aria-label': title, 'data-test': test },
    h('div', { class: 'dialog-title' }, title),
    h('div', { class: 'dialog-body' }, body),
    h('div', { class: 'dialog-actions' }, actions),
  );
  const backdrop = h('div', { class: 'backdrop' }, box);
  const close = () => {
    backdrop.remove();
    document.removeEventListener('keydown', onKey);
    openDialogs.delete(close);
  };
  openDialogs.add(close);
  const onKey = (e: KeyboardEvent) => {
    if (e.key === 'Escape') close();
  };
  backdrop.addEventListener('mousedown', (e) => {
    if (e.target === backdrop) close();
  });
  document.addEventListener('keydown', onKey);
  document.body.appendChild(backdrop);
  const first = box.querySelector<HTMLElement>('input, select, textarea, button.primary');
  first?.focus();
  return { el: box, close };
}

/**
 * Asks before something that cannot be undone. `action` runs with the dialog open;
 * its error is shown in the dialog, which closes on success.
 */
export function confirmAction(
  title: string,
  message: Child,
  confirmLabel: string,
  action: () => Promise<void>,
): void {
  const err = errorLine('dialog-error');
  const ok = h('button', { class: 'danger', 'data-test': 'confirm' }, confirmLabel);
  const cancel = h('button', { 'data-test': 'cancel' }, 'Cancel');
  const d = dialog(title, [h('p', null, message), err.el], [cancel, ok], 'confirm-dialog');
  cancel.addEventListener('click', () => d.close());
  ok.addEventListener('click', async () => {
    err.clear();
    try {
      await busy(ok, `${confirmLabel}…`, action);
      d.close();
    } catch (e) {
      err.show(e);
    }
  });
  ok.focus();
}

export function healthBadge(health: string): HTMLElement {
  const h0 = health.toUpperCase();
  const cls =
    h0 === 'ONLINE' ? 'ok' : h0 === 'DEGRADED' ? 'warn' : h0 === '' ? 'unknown' : 'bad';
  return h('span', { class: `badge ${cls}`, 'data-test': 'health' }, health || 'unknown');
}

export function capacityBar(used: number, total: number): HTMLElement {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  const cls = pct >= 90 ? 'bad' : pct >= 80 ? 'warn' : 'ok';
  return h(
    'div',
    { class: 'capacity', title: `${fmtBytes(used)} of ${fmtBytes(total)} (${fmtPercent(used, total)})` },
    h('div', { class: 'capacity-bar' }, h('div', { class: `capacity-fill ${cls}`, style: `width:${pct.toFixed(1)}%` })),
    h('span', { class: 'capacity-text' }, `${fmtBytes(used)} / ${fmtBytes(total)}`, h('span', { class: 'dim' }, ` ${fmtPercent(used, total)}`)),
  );
}

/** A titled panel; `tools` go to the right of the title. */
export function panel(title: Child, body: Child, tools?: Child, attrs?: Record<string, unknown>): HTMLElement {
  return h(
    'section',
    { class: 'panel', ...attrs },
    h('header', { class: 'panel-head' }, h('h2', null, title), h('div', { class: 'panel-tools' }, tools)),
    h('div', { class: 'panel-body' }, body),
  );
}

/** A page title line with optional tools on the right. */
export function pageHead(title: string, subtitle?: Child, tools?: Child): HTMLElement {
  return h(
    'div',
    { class: 'page-head' },
    h('div', null, h('h1', null, title), subtitle ? h('div', { class: 'subtitle' }, subtitle) : null),
    h('div', { class: 'page-tools' }, tools),
  );
}

export interface Column<T> {
  title: string;
  cell: (row: T) => Child;
  class?: string;
}

export function table<T>(columns: Column<T>[], rows: T[], empty: string, rowAttrs?: (row: T) => Record<string, unknown>): HTMLElement {
  if (rows.length === 0) return h('div', { class: 'empty' }, empty);
  return h(
    'table',
    { class: 'grid' },
    h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.class }, c.title)))),
    h(
      'tbody',
      null,
      rows.map((r) => h('tr', rowAttrs ? rowAttrs(r) : null, columns.map((c) => h('td', { class: c.class }, c.cell(r))))),
    ),
  );
}

/** A labelled form field. */
export function field(label: string, input: HTMLElement, hint?: string): HTMLElement {
  return h('label', { class: 'field' }, h('span', { class: 'field-label' }, label), input, hint ? h('span', { class: 'field-hint' }, hint) : null);
}

/** Shows "Loading…" in `el` until `load` resolves, then its content, or the error. */
export async function loadInto(el: HTMLElement, load: () => Promise<Child>): Promise<void> {
  if (!el.firstChild) replace(el, h('div', { class: 'loading' }, 'Loading…'));
  try {
    const content = await load();
    replace(el, content);
  } catch (e) {
    replace(el, h('div', { class: 'error-line', 'data-test': 'error' }, messageOf(e)));
  }
}

/** A short-lived note in the corner: "Filesystem tank/home created". */
export function toast(message: string): void {
  let box = document.querySelector<HTMLElement>('.toasts');
  if (!box) {
    box = h('div', { class: 'toasts' });
    document.body.appendChild(box);
  }
  const t = h('div', { class: 'toast', 'data-test': 'toast' }, message);
  box.appendChild(t);
  setTimeout(() => t.remove(), 4000);
}
