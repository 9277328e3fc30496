// The Shares page: shared filesystems with their export rules and the clients
// that mounted them, a form to share a filesystem (or change its rules), and
// unshare with confirmation.

import * as api from '../api';
import { h, options } from '../dom';
import type { Page } from '../page';
import { busy, confirmAction, dialog, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

const DEFAULT_RULES = '*(rw)';

export function sharesPage(): Page {
  const listEl = h('div');
  const err = errorLine('share-error');
  const dataset = h('select', { 'data-test': 'share-dataset', required: true });
  const rules = h('input', { type: 'text', value: DEFAULT_RULES, size: 44, 'data-test': 'share-rules', spellcheck: false });
  const submit = h('button', { class: 'primary', type: 'submit', 'data-test': 'share-submit' }, 'Share');
  const form = h(
    'form',
    { class: 'form-row', 'data-test': 'share-form' },
    field('Filesystem', dataset),
    field('Rules', rules, 'as in /etc/exports: 10.0.0.0/8(rw) *(ro)'),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), submit),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.clear();
    const name = dataset.value;
    try {
      await busy(submit, 'Sharing…', () => api.putShare(name, rules.value.trim()));
      toast(`${name} shared`);
      rules.value = DEFAULT_RULES;
      await refresh();
    } catch (e) {
      err.show(e);
    }
  });

  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-shares' },
    pageHead('Shares', 'Filesystems exported over NFSv3'),
    panel('Share a filesystem', [form, err.el]),
    panel('Shared filesystems', listEl),
  );

  async function refresh(): Promise<void> {
    await loadInto(listEl, async () => {
      const [shares, exps, fss] = await Promise.all([api.shares(), api.exports(), api.filesystems()]);
      const sharedNames = new Set(shares.map((s) => s.dataset));
      const unshared = fss.map((f) => f.name).filter((n) => !sharedNames.has(n));
      const keep = dataset.value;
      dataset.replaceChildren(
        ...options(
          unshared.length ? unshared.map((n): [string, string] => [n, n]) : [['', 'every filesystem is shared']],
          unshared.includes(keep) ? keep : unshared.find((n) => n.includes('/')) ?? unshared[0],
        ),
      );
      const mounts = new Map(exps.map((x) => [x.path, x.mounts]));
      return table(
        [
          { title: 'Filesystem', cell: (s) => h('b', null, s.dataset) },
          { title: 'Export path', cell: (s) => h('code', null, s.path) },
          { title: 'Rules', cell: (s) => h('code', { 'data-test': 'share-rules-cell' }, s.rules) },
          { title: 'Dataset', cell: (s) => (s.read_only_dataset ? h('span', { class: 'badge warn' }, 'read-only') : 'read-write') },
          {
            title: 'Mounted by',
            cell: (s) => {
              const m = mounts.get(s.path) ?? [];
              return m.length ? m.map((x) => h('div', null, h('code', null, x))) : h('span', { class: 'dim' }, 'no client');
            },
          },
          {
            title: '',
            class: 'actions',
            cell: (s) => [
              h('button', { class: 'small', 'data-test': 'share-edit', onclick: () => editRules(s) }, 'Rules'),
              h('button', { class: 'small danger-text', 'data-test': 'unshare', onclick: () => unshare(s) }, 'Unshare'),
            ],
          },
        ],
        shares,
        'Nothing is shared.',
        (s) => ({ 'data-test': 'share-row', 'data-dataset': s.dataset }),
      );
    });
  }

  function editRules(s: api.Share): void {
    const derr = errorLine('dialog-error');
    const input = h('input', { type: 'text', value: s.rules, size: 60, 'data-test': 'share-rules-edit', spellcheck: false });
    const save = h('button', { class: 'primary', 'data-test': 'share-rules-save' }, 'Apply');
    const cancel = h('button', null, 'Cancel');
    const d = dialog(`Export rules of ${s.dataset}`, [field('Rules', input, 'host or network(options), separated by spaces'), derr.el], [cancel, save]);
    cancel.addEventListener('click', () => d.close());
    save.addEventListener('click', async () => {
      derr.clear();
      try {
        await busy(save, 'Applying…', () => api.putShare(s.dataset, input.value.trim()));
        d.close();
        toast(`Rules of ${s.dataset} changed`);
        await refresh();
      } catch (e) {
        derr.show(e);
      }
    });
  }

  function unshare(s: api.Share): void {
    confirmAction(
      'Stop sharing',
      ['Stop sharing ', h('b', null, s.dataset), '? Clients that mounted it get stale file handles.'],
      'Unshare',
      async () => {
        await api.deleteShare(s.dataset);
        toast(`${s.dataset} no longer shared`);
        await refresh();
      },
    );
  }

  void refresh();
  return { el };
}
