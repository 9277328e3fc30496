// The snapshot schedules panel of the Filesystems page: every schedule with its next
// run and its last (taken, pruned, or why it failed), a form to add one (dataset,
// period, how many to keep, recursive), run one now, and remove one.

import * as api from '../api';
import { h, options, setOptions } from '../dom';
import { fmtDateTime, fmtDuration } from '../format';
import { busy, confirmAction, errorLine, field, loadInto, panel, table, toast } from '../widgets';

/** The periods offered (the API takes others too: 5m, 6h, 3mo...). */
const PERIODS: [string, string][] = [
  ['15m', 'every 15 minutes'],
  ['1h', 'hourly'],
  ['1d', 'daily'],
  ['1w', 'weekly'],
  ['1mo', 'monthly'],
];

/** sanoid's defaults for each period. */
const KEEP: Record<string, number> = { '15m': 8, '1h': 24, '1d': 30, '1w': 8, '1mo': 12 };

function lastRun(s: api.ScheduleStatus): HTMLElement | string {
  const r = s.last_run;
  if (!r) return h('span', { class: 'dim' }, 'not yet');
  const when = fmtDateTime(r.at_unix);
  if (!r.ok) return h('span', { class: 'badge bad', 'data-test': 'schedule-last', 'data-state': 'failed', title: r.error ?? '' }, `failed ${when}: ${r.error ?? ''}`);
  const pruned = r.pruned.length ? `, pruned ${r.pruned.length}` : '';
  return h('span', { 'data-test': 'schedule-last', 'data-state': 'ok' }, `${when}: took ${r.taken.length}${pruned}`);
}

/** The panel; `datasets` gives the names a schedule can be added for. */
export function schedulesPanel(datasets: () => Promise<string[]>): { el: HTMLElement; refresh: () => Promise<void> } {
  const listEl = h('div');
  const err = errorLine('schedule-error');
  const dataset = h('select', { 'data-test': 'schedule-dataset' });
  const every = h('select', { 'data-test': 'schedule-every' }, options(PERIODS, '1h'));
  const keep = h('input', { type: 'number', min: 1, max: 10000, value: String(KEEP['1h']), size: 5, 'data-test': 'schedule-keep' });
  const recursive = h('input', { type: 'checkbox', 'data-test': 'schedule-recursive' });
  every.addEventListener('change', () => {
    keep.value = String(KEEP[every.value] ?? keep.value);
  });
  const submit = h('button', { class: 'primary', type: 'submit', 'data-test': 'schedule-add' }, 'Add schedule');
  const form = h(
    'form',
    { class: 'form-row' },
    field('Dataset', dataset),
    field('Every', every),
    field('Keep', keep),
    field('Children too', recursive),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), submit),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    err.clear();
    try {
      const s = await busy(submit, 'Adding…', () =>
        api.addSchedule({ dataset: dataset.value, every: every.value, keep: Number(keep.value), recursive: recursive.checked }),
      );
      toast(`Schedule ${s.id}: ${s.dataset} every ${s.every}, keep ${s.keep}`);
      await refresh();
    } catch (e) {
      err.show(e);
    }
  });

  async function refresh(): Promise<void> {
    await loadInto(listEl, async () => {
      const [list, names] = await Promise.all([api.schedules(), datasets()]);
      setOptions(dataset, names.map((n): [string, string] => [n, n]), names.find((n) => n.includes('/')));
      const now = Date.now() / 1000;
      return table(
        [
          { title: 'Dataset', cell: (s) => s.dataset },
          { title: 'Every', cell: (s) => s.every },
          { title: 'Keep', cell: (s) => String(s.keep), class: 'num' },
          { title: 'Children', cell: (s) => (s.recursive ? 'yes' : '') },
          {
            title: 'Next run',
            cell: (s) => h('span', { 'data-test': 'schedule-next', title: fmtDateTime(s.next_run_unix) }, s.next_run_unix <= now ? 'now' : `in ${fmtDuration(s.next_run_unix - now)}`),
          },
          { title: 'Last run', cell: lastRun },
          {
            title: '',
            class: 'actions',
            cell: (s) => [
              h('button', { class: 'small', 'data-test': 'schedule-run', onclick: () => runNow(s) }, 'Run now'),
              h('button', { class: 'small danger-text', 'data-test': 'schedule-remove', onclick: () => remove(s) }, 'Remove'),
            ],
          },
        ],
        list,
        'No snapshot schedules.',
        (s) => ({ 'data-test': 'schedule-row', 'data-id': String(s.id), 'data-dataset': s.dataset, 'data-every': s.every }),
      );
    });
  }

  async function runNow(s: api.ScheduleStatus): Promise<void> {
    try {
      const r = await api.runSchedule(s.id);
      toast(r.ok ? `Took ${r.taken.join(', ')}` : `The snapshot failed: ${r.error}`);
    } catch (e) {
      toast(`The snapshot failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    await refresh();
  }

  function remove(s: api.ScheduleStatus): void {
    confirmAction('Remove schedule', ['Stop snapshotting ', h('b', null, s.dataset), ` every ${s.every}? Its snapshots stay.`], 'Remove', async () => {
      await api.removeSchedule(s.id);
      toast(`Schedule ${s.id} removed`);
      await refresh();
    });
  }

  const el = panel('Snapshot schedules', [form, err.el, listEl], undefined, { 'data-test': 'schedules-panel' });
  return { el, refresh };
}
