// The Snapshots page: snapshots grouped by filesystem (oldest first), a form to
// take one, destroy, roll a filesystem back to any snapshot (the newer ones are
// named and destroyed with it), and the holds that keep a snapshot from being
// destroyed: placed, listed and released here.

import * as api from '../api';
import { h, options, type Child } from '../dom';
import { fmtBytes, fmtInt } from '../format';
import type { Page } from '../page';
import { busy, confirmAction, dialog, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

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
            title: 'Holds',
            cell: (s) =>
              s.holds.map((tag) =>
                h(
                  'span',
                  { class: 'badge unknown', 'data-test': 'snap-hold', title: `Held by '${tag}': click to release`, style: 'cursor:pointer', onclick: () => release(s, tag) },
                  tag,
                  ' \u00d7',
                ),
              ),
          },
          {
            title: '',
            class: 'actions',
            cell: (s) => {
              const fs = s.name.split('@')[0];
              const held = s.holds.length > 0;
              return [
                h('button', { class: 'small', 'data-test': 'snap-rollback', title: `Roll ${fs} back to this snapshot`, onclick: () => rollback(s, snaps) }, 'Roll back'),
                h('button', { class: 'small', 'data-test': 'snap-hold-add', title: 'Keep this snapshot from being destroyed', onclick: () => hold(s) }, 'Hold'),
                h(
                  'button',
                  {
                    class: 'small danger-text',
                    'data-test': 'snap-destroy',
                    disabled: held,
                    title: held ? `Held (${s.holds.join(', ')}): release its holds first` : 'Destroy this snapshot',
                    onclick: () => destroy(s),
                  },
                  'Destroy',
                ),
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

  function rollback(s: api.Snapshot, all: api.Snapshot[]): void {
    const fs = s.name.split('@')[0];
    const newer = all.filter((x) => x.name.split('@')[0] === fs && x.txg > s.txg).sort((a, b) => a.txg - b.txg);
    const message: Child[] = ['Roll ', h('b', null, fs), ' back to ', h('b', null, s.name), '? Every change made since is lost.'];
    if (newer.length > 0) {
      message.push(
        ' The newer snapshots are destroyed with it: ',
        h('b', { 'data-test': 'rollback-newer' }, newer.map((x) => x.name.split('@')[1]).join(', ')),
        '.',
      );
    }
    message.push(' A shared filesystem stays shared: its clients pause for the rollback.');
    confirmAction('Roll back', message, newer.length > 0 ? `Roll back and destroy ${newer.length}` : 'Roll back', async () => {
      await api.rollback(s.name, newer.length > 0);
      toast(`${fs} rolled back to ${s.name}`);
      await refresh();
    });
  }

  function hold(s: api.Snapshot): void {
    const err = errorLine('dialog-error');
    const tag = h('input', { type: 'text', value: 'keep', size: 24, maxlength: 64, 'data-test': 'hold-tag' });
    const ok = h('button', { class: 'primary', 'data-test': 'confirm' }, 'Hold');
    const cancel = h('button', { 'data-test': 'cancel' }, 'Cancel');
    const d = dialog(
      'Hold snapshot',
      [h('p', null, 'A held snapshot cannot be destroyed (by hand, by a rollback or by a schedule) until every hold on it is released. ', h('b', null, s.name)), field('Tag', tag), err.el],
      [cancel, ok],
      'hold-dialog',
    );
    cancel.addEventListener('click', () => d.close());
    ok.addEventListener('click', async () => {
      err.clear();
      try {
        await busy(ok, 'Holding…', () => api.hold(s.name, tag.value.trim()));
        d.close();
        toast(`${s.name} held (${tag.value.trim()})`);
        await refresh();
      } catch (e) {
        err.show(e);
      }
    });
  }

  function release(s: api.Snapshot, tag: string): void {
    confirmAction('Release hold', ['Release hold ', h('b', null, tag), ' on ', h('b', null, s.name), '?'], 'Release', async () => {
      await api.release(s.name, tag);
      toast(`${s.name} released (${tag})`);
      await refresh();
    });
  }

  void refresh();
  return { el };
}
