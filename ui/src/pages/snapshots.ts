// The Snapshots page: snapshots grouped by filesystem (oldest first), a form to
// take one, destroy, and roll a filesystem back to its latest snapshot.

import * as api from '../api';
import { h, options } from '../dom';
import { fmtBytes, fmtInt } from '../format';
import type { Page } from '../page';
import { busy, confirmAction, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** A default snapshot name from the local time: 2026-11-23-2301. */
function defaultName(): string {
  const d = new Date();
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}-${pad2(d.getHours())}${pad2(d.getMinutes())}${pad2(d.getSeconds())}`;
}

export function snapshotsPage(): Page {
  const listEl = h('div');
  const err = errorLine('snapshot-error');
  const fsSelect = h('select', { 'data-test': 'snap-fs' });
  const name = h('input', { type: 'text', value: defaultName(), size: 22, 'data-test': 'snap-name' });
  const submit = h('button', { class: 'primary', type: 'submit', 'data-test': 'snap-create' }, 'Take snapshot');
  const form = h(
    'form',
    { class: 'form-row' },
    field('Filesystem', fsSelect),
    field('Snapshot name', name),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), submit),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.clear();
    const full = `${fsSelect.value}@${name.value.trim()}`;
    try {
      await busy(submit, 'Taking…', () => api.createSnapshot(full));
      toast(`Snapshot ${full} taken`);
      name.value = defaultName();
      await refresh();
    } catch (e) {
      err.show(e);
    }
  });

  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-snapshots' },
    pageHead('Snapshots', 'Read-only points in time of a filesystem; no data is copied'),
    panel('Take a snapshot', [form, err.el]),
    panel('Snapshots', listEl),
  );

  async function refresh(): Promise<void> {
    await loadInto(listEl, async () => {
      const [snaps, fss] = await Promise.all([api.snapshots(), api.filesystems()]);
      const keep = fsSelect.value;
      fsSelect.replaceChildren(...options(fss.map((f): [string, string] => [f.name, f.name]), keep || fss.find((f) => f.name.includes('/'))?.name));
      // The latest snapshot of each filesystem is the one rollback goes to.
      const latest = new Map<string, api.Snapshot>();
      for (const s of snaps) {
        const fs = s.name.split('@')[0];
        const cur = latest.get(fs);
        if (!cur || s.txg >= cur.txg) latest.set(fs, s);
      }
      const sorted = [...snaps].sort((a, b) => {
        const fa = a.name.split('@')[0];
        const fb = b.name.split('@')[0];
        return fa === fb ? a.txg - b.txg : fa < fb ? -1 : 1;
      });
      return table(
        [
          { title: 'Filesystem', cell: (s) => s.name.split('@')[0] },
          { title: 'Snapshot', cell: (s) => h('b', null, s.name.split('@')[1] ?? s.name) },
          { title: 'Transaction group', cell: (s) => fmtInt(s.txg), class: 'num' },
          { title: 'Unique data', cell: (s) => fmtBytes(s.unique_bytes), class: 'num' },
          {
            title: '',
            class: 'actions',
            cell: (s) => {
              const fs = s.name.split('@')[0];
              const isLatest = latest.get(fs)?.id === s.id;
              return [
                h(
                  'button',
                  {
                    class: 'small',
                    'data-test': 'snap-rollback',
                    disabled: !isLatest,
                    title: isLatest ? `Roll ${fs} back to this snapshot` : 'Only the latest snapshot of a filesystem can be rolled back to',
                    onclick: () => rollback(s),
                  },
                  'Roll back',
                ),
                h('button', { class: 'small danger-text', 'data-test': 'snap-destroy', onclick: () => destroy(s) }, 'Destroy'),
              ];
            },
          },
        ],
        sorted,
        'No snapshots.',
        (s) => ({ 'data-test': 'snap-row', 'data-name': s.name }),
      );
    });
  }

  function destroy(s: api.Snapshot): void {
    confirmAction('Destroy snapshot', ['Destroy ', h('b', null, s.name), `? ${fmtBytes(s.unique_bytes)} held only by it will be freed.`], 'Destroy', async () => {
      await api.destroySnapshot(s.name);
      toast(`Snapshot ${s.name} destroyed`);
      await refresh();
    });
  }

  function rollback(s: api.Snapshot): void {
    const fs = s.name.split('@')[0];
    confirmAction(
      'Roll back',
      ['Roll ', h('b', null, fs), ' back to ', h('b', null, s.name), '? Every change made since is lost. A shared filesystem must be unshared first.'],
      'Roll back',
      async () => {
        await api.rollback(s.name);
        toast(`${fs} rolled back to ${s.name}`);
        await refresh();
      },
    );
  }

  void refresh();
  return { el };
}
