// A tiny DOM builder: h('button', {class: 'primary', onclick: save}, 'Save').
// Attributes starting with "on" take listeners; value/checked/disabled/selected are
// set as properties; true adds a bare attribute, false/null/undefined skip it.

export type Child = Node | string | number | null | undefined | false | Child[];
export type Attrs = Record<string, unknown>;

const PROPS = new Set(['value', 'checked', 'disabled', 'selected', 'hidden']);

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) {
        if (PROPS.has(k)) (el as unknown as Record<string, unknown>)[k] = false;
        continue;
      }
      if (k.startsWith('on') && typeof v === 'function') {
        el.addEventListener(k.slice(2), v as EventListener);
      } else if (PROPS.has(k)) {
        (el as unknown as Record<string, unknown>)[k] = v;
      } else if (v === true) {
        el.setAttribute(k, '');
      } else {
        el.setAttribute(k, String(v));
      }
    }
  }
  append(el, ...children);
  return el;
}

export function append(el: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, ...c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function replace(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, ...children);
}

/** An <option> list for a <select>: [value, label] pairs. */
export function options(items: [string, string][], selected?: string): HTMLOptionElement[] {
  return items.map(([value, label]) => h('option', { value, selected: value === selected }, label));
}

/** Gives a select these options, keeping the current choice when it is still offered
 *  (else `fallback`). Leaves the select alone when it already holds exactly these
 *  options: a page that refreshes every few seconds must not close a list the user has
 *  open, or undo a choice, by rebuilding it. */
export function setOptions(select: HTMLSelectElement, items: [string, string][], fallback?: string): void {
  const now = Array.from(select.options, (o): [string, string] => [o.value, o.text]);
  const same = now.length === items.length && now.every(([v, l], i) => v === items[i][0] && l === items[i][1]);
  if (same) return;
  const keep = items.some(([v]) => v === select.value) ? select.value : fallback;
  select.replaceChildren(...options(items, keep));
}
