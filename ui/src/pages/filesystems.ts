// The Filesystems page: every filesystem with its space and main properties, a
// form to create one (name and properties), a dialog to set or inherit
// properties (PATCH), destroy with confirmation, and the snapshot schedules
// (`schedules.ts`).

import * as api from '../api';
import { h, options } from '../dom';
import { fmtBytes } from '../format';
import { every, type Page } from '../page';
import { schedulesPanel } from './schedules';
import { busy, confirmAction, dialog, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

/** Properties that can be set, with their choices; null choices mean free text. */
export const EDITABLE: { name: string; choices: string[] | null; hint?: string }[] = [
  {
    name: 'compression',
    choices: ['off', 'lz4', 'lzjb', 'gzip', ...range(1, 9).map((i) => `gzip-${i}`), 'zstd', ...range(1, 19).map((i) => `zstd-${i}`)],
  },
  { name: 'recordsize', choices: ['512', '1K', '2K', '4K', '8K', '16K', '32K', '64K', '128K', '256K', '512K', '1M'] },
  { name: 'atime', choices: ['on', 'off'] },
  { name: 'sync', choices: ['standard', 'always', 'disabled'], hint: 'disabled acknowledges synchronous writes before they are durable' },
  { name: 'checksum', choices: ['fletcher4', 'blake3'] },
  { name: 'readonly', choices: ['on', 'off'] },
  { name: 'quota', choices: null, hint: 'a size such as 10G, or none' },
  { name: 'reservation', choices: null, hint: 'a size such as 1G, or none' },
];

/** Properties offered when creating a filesystem. */
const CREATE_PROPS = ['compression', 'recordsize', 'atime', 'sync', 'quota'];

function range(a: number, b: number): number[] {
  return Array.from({ length: b - a + 1 }, (_, i) => a + i);
}

export function prop(fs: api.Filesystem, name: string): api.Property | undefined {
  return fs.props.find((p) => p.property === name);
}

function num(fs: api.Filesystem, name: string): number {
  return Number(prop(fs, name)?.value ?? NaN);
}

/** A property's value, dimmed with its source when not set locally. */
function propCell(fs: api.Filesystem, name: string): HTMLElement {
  const p = prop(fs, name);
  if (!p) return h('span', { class: 'dim' }, '-');
  const local = p.source === 'local';
  return h('span', { class: local ? 'prop-local' : 'prop-inherited', title: p.source }, p.value);
}

/** An editor for one property: a select (or text box) whose empty value means inherit. */
function propInput(name: string, current: string, inheritLabel: string, test: string): HTMLSelectElement | HTMLInputElement {
  const spec = EDITABLE.find((e) => e.name === name);
  if (!spec?.choices) {
    return h('input', { type: 'text', value: current, placeholder: inheritLabel, 'data-test': test, name });
  }
  return h(
    'select',
    { 'data-test': test, name },
    options([['', inheritLabel], ...spec.choices.map((c): [string, string] => [c, c])], current),
  );
}

export function filesystemsPage(): Page {
  const listEl = h('div');
  const schedules = schedulesPanel(async () => {
    const [fss, vols] = await Promise.all([api.filesystems(), api.volumes().catch(() => [])]);
    return [...fss.map((f) => f.name), ...vols.map((v) => v.name)].sort();
  });
  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-filesystems' },
    pageHead('Filesystems', 'Datasets, their space and properties (inherited values are grey)'),
    createPanel(),
    panel('Filesystems', listEl),
    schedules.el,
  );

  let shared = new Set<string>();

  async function refresh(): Promise<void> {
    await loadInto(listEl, async () => {
      const [list, shares] = await Promise.all([api.filesystems(), api.shares()]);
      shared = new Set(shares.map((s) => s.dataset));
      return fsTable(list);
    });
  }

  function fsTable(list: api.Filesystem[]): HTMLElement {
    return table(
      [
        { title: 'Name', cell: (f) => h('span', { class: 'fs-name', style: `padding-left:${(f.name.split('/').length - 1) * 14}px` }, f.name) },
        { title: 'Used', cell: (f) => fmtBytes(num(f, 'used')), class: 'num' },
        { title: 'Available', cell: (f) => fmtBytes(num(f, 'available')), class: 'num' },
        { title: 'Referenced', cell: (f) => fmtBytes(num(f, 'referenced')), class: 'num' },
        { title: 'Snapshots', cell: (f) => fmtBytes(num(f, 'usedbysnapshots')), class: 'num' },
        { title: 'Compression', cell: (f) => propCell(f, 'compression') },
        { title: 'Record', cell: (f) => propCell(f, 'recordsize') },
        { title: 'atime', cell: (f) => propCell(f, 'atime') },
        { title: 'sync', cell: (f) => propCell(f, 'sync') },
        { title: 'Quota', cell: (f) => propCell(f, 'quota') },
        { title: 'Shared', cell: (f) => (shared.has(f.name) ? h('span', { class: 'badge ok' }, 'NFS') : '') },
        {
          title: '',
          class: 'actions',
          cell: (f) => [
            h('button', { class: 'small', 'data-test': 'fs-edit', onclick: () => editDialog(f) }, 'Properties'),
            f.name.includes('/')
              ? h('button', { class: 'small danger-text', 'data-test': 'fs-destroy', onclick: () => destroy(f) }, 'Destroy')
              : null,
          ],
        },
      ],
      list,
      'No filesystems.',
      (f) => ({ 'data-test': 'fs-row', 'data-name': f.name }),
    );
  }

  function createPanel(): HTMLElement {
    const err = errorLine('fs-create-error');
    const name = h('input', { type: 'text', placeholder: 'pool/name', 'data-test': 'fs-name', required: true, size: 28 });
    const inputs = CREATE_PROPS.map((p) => [p, propInput(p, '', 'inherit', `fs-${p}`)] as const);
    const submit = h('button', { class: 'primary', type: 'submit', 'data-test': 'fs-create' }, 'Create');
    const form = h(
      'form',
      { class: 'form-row', 'data-test': 'fs-create-form' },
      field('Name', name),
      inputs.map(([p, input]) => field(p, input)),
      h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), submit),
    );
    api.pools().then((ps) => {
      if (!name.value && ps[0]) name.value = `${ps[0].name}/`;
    }, () => undefined);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      err.clear();
      const properties: Record<string, string> = {};
      for (const [p, input] of inputs) if (input.value.trim()) properties[p] = input.value.trim();
      const fsName = name.value.trim();
      try {
        await busy(submit, 'Creating…', () => api.createFilesystem(fsName, properties));
        toast(`Filesystem ${fsName} created`);
        name.value = fsName.slice(0, fsName.lastIndexOf('/') + 1);
        await refresh();
      } catch (e) {
        err.show(e);
      }
    });
    return panel('Create a filesystem', [form, err.el]);
  }

  function editDialog(fs: api.Filesystem): void {
    const err = errorLine('dialog-error');
    const rows = EDITABLE.map((spec) => {
      const p = prop(fs, spec.name);
      const local = p?.source === 'local' ? p.value : '';
      const inheritLabel = p && p.source !== 'local' ? `inherit (${p.value}, ${p.source})` : 'inherit';
      const input = propInput(spec.name, local, inheritLabel, `prop-${spec.name}`);
      return { spec, local, input };
    });
    const save = h('button', { class: 'primary', 'data-test': 'props-save' }, 'Apply');
    const cancel = h('button', null, 'Cancel');
    const d = dialog(
      `Properties of ${fs.name}`,
      [
        h('table', { class: 'props-form' }, rows.map((r) => h('tr', null, h('th', null, r.spec.name), h('td', null, r.input), h('td', { class: 'dim small' }, r.spec.hint ?? '')))),
        err.el,
      ],
      [cancel, save],
      'props-dialog',
    );
    cancel.addEventListener('click', () => d.close());
    save.addEventListener('click', async () => {
      err.clear();
      const changes: Record<string, string | null> = {};
      for (const r of rows) {
        const v = r.input.value.trim();
        if (v !== r.local) changes[r.spec.name] = v === '' ? null : v;
      }
      if (Object.keys(changes).length === 0) return d.close();
      try {
        await busy(save, 'Applying…', () => api.setProperties(fs.name, changes));
        d.close();
        toast(`Properties of ${fs.name} changed`);
        await refresh();
      } catch (e) {
        err.show(e);
      }
    });
  }

  function destroy(fs: api.Filesystem): void {
    confirmAction(
      'Destroy filesystem',
      ['Destroy ', h('b', null, fs.name), ' and all its files and snapshots? This cannot be undone.'],
      'Destroy',
      async () => {
        await api.destroyFilesystem(fs.name);
        toast(`Filesystem ${fs.name} destroyed`);
        await refresh();
      },
    );
  }

  void refresh();
  void schedules.refresh();
  // The schedules' next and last runs move on their own.
  const stop = every(15000, schedules.refresh);
  return { el, dispose: stop };
}
