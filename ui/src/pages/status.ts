// The Status page: the daemon (version, uptime, addresses), pool health and
// capacity, shares, and a minute of activity from the built-in analytics
// datasets, refreshed every few seconds.

import * as api from '../api';
import { h, replace } from '../dom';
import { type Catalog, loadCatalog } from '../analytics/catalog';
import { fmtDateTime, fmtDuration, fmtInt } from '../format';
import { every, type Page } from '../page';
import { href } from '../router';
import { capacityBar, healthBadge, messageOf, pageHead, panel, table } from '../widgets';

/** At most this many built-in datasets are summarised on the Status page. */
const ACTIVITY_ROWS = 8;

/**
 * The built-in datasets worth a line: one per statistic, not heatmaps, the
 * undivided one preferred. Whatever the daemon records by default is shown.
 */
function activityDatasets(all: api.DatasetInfo[], catalog: Catalog): api.DatasetInfo[] {
  const picked = new Map<string, api.DatasetInfo>();
  for (const d of all) {
    if (!d.builtin || d.filters.length) continue;
    if (d.breakdown && catalog.dimension(d.statistic, d.breakdown)?.kind === 'numeric') continue;
    const cur = picked.get(d.statistic);
    if (!cur || (cur.breakdown && !d.breakdown)) picked.set(d.statistic, d);
  }
  // In the daemon's order of statistics, which puts the NFS ones first.
  const order = catalog.list().map((s) => s.name);
  return [...picked.values()].sort((a, b) => order.indexOf(a.statistic) - order.indexOf(b.statistic)).slice(0, ACTIVITY_ROWS);
}

export function statusPage(): Page {
  const system = h('div', { class: 'panel-slot' });
  const poolsEl = h('div', { class: 'panel-slot' });
  const sharesEl = h('div', { class: 'panel-slot' });
  const activity = h('div', { class: 'activity', 'data-test': 'activity' });
  const el = h(
    'div',
    { class: 'page status-page', 'data-test': 'page-status' },
    pageHead('Status', 'The daemon, its pools and shares, and the last minute of activity'),
    h('div', { class: 'columns' }, h('div', { class: 'col' }, system, poolsEl), h('div', { class: 'col' }, panel('Activity, last minute', activity, h('a', { href: href('analytics') }, 'Open Analytics')))),
    sharesEl,
  );

  async function refresh(): Promise<void> {
    try {
      const s = await api.status();
      replace(system, systemPanel(s));
      replace(poolsEl, poolsPanel(s));
      replace(sharesEl, sharesPanel(s));
    } catch (e) {
      replace(system, panel('System', h('div', { class: 'error-line', 'data-test': 'error' }, messageOf(e))));
    }
  }

  let shown: api.DatasetInfo[] | null = null;
  let catalog: Catalog | null = null;
  async function refreshActivity(): Promise<void> {
    if (!shown || !catalog) {
      try {
        catalog = await loadCatalog();
        shown = activityDatasets(await api.datasets(), catalog);
      } catch (e) {
        replace(activity, h('div', { class: 'error-line' }, messageOf(e)));
        return;
      }
    }
    const cat = catalog;
    const rows = await Promise.all(
      shown.map(async (ds) => {
        const stat = cat.get(ds.statistic);
        const fmt = (v: number) => stat.format.value(v / stat.divisor);
        const title = h('a', { class: 'activity-title', href: href('analytics'), title: ds.name }, stat.description);
        try {
          const d = await api.data({ name: ds.name, seconds: 60 });
          const last = d.points[d.points.length - 1];
          const now = last ? last.total / last.seconds : 0;
          return h(
            'div',
            { class: 'activity-row', 'data-dataset': ds.name },
            title,
            h('span', { class: 'activity-now' }, fmt(now)),
            h('span', { class: 'activity-avg dim' }, `average ${fmt(d.summary.average)} \u00b7 maximum ${fmt(d.summary.max)}`),
          );
        } catch (e) {
          return h('div', { class: 'activity-row' }, title, h('span', { class: 'dim' }, messageOf(e)));
        }
      }),
    );
    replace(activity, rows.length ? rows : h('div', { class: 'empty' }, 'No statistics are recorded.'));
  }

  void refresh();
  void refreshActivity();
  const stop1 = every(5000, refresh);
  const stop2 = every(2000, refreshActivity);
  return {
    el,
    dispose() {
      stop1();
      stop2();
    },
  };
}

function systemPanel(s: api.Status): HTMLElement {
  const uptime = Math.max(0, Date.now() / 1000 - s.started_unix);
  const kv: [string, string][] = [
    ['Version', s.version],
    ['Started', `${fmtDateTime(s.started_unix)} (up ${fmtDuration(uptime)})`],
    ['Process', String(s.pid)],
    ['NFSv3', s.nfs.join(', ') || 'not listening'],
    ['Admin API', s.api],
  ];
  return panel('System', h('dl', { class: 'kv', 'data-test': 'system' }, kv.map(([k, v]) => [h('dt', null, k), h('dd', null, v)])));
}

function poolsPanel(s: api.Status): HTMLElement {
  return panel(
    'Pools',
    table(
      [
        { title: 'Pool', cell: (p) => h('a', { href: href('pools') }, p.name) },
        { title: 'Health', cell: (p) => healthBadge(p.health) },
        { title: 'Allocated', cell: (p) => capacityBar(p.allocated_bytes, p.capacity_bytes), class: 'wide' },
        { title: 'Filesystems', cell: (p) => fmtInt(p.filesystems.length), class: 'num' },
      ],
      s.pools,
      'No pool is imported.',
    ),
    h('a', { href: href('pools') }, 'Details'),
  );
}

function sharesPanel(s: api.Status): HTMLElement {
  const syncOff = s.pools.flatMap((p) => p.filesystems).filter((f) => f.sync === 'disabled');
  return panel(
    'Shares',
    [
      syncOff.length
        ? h('div', { class: 'warn-line' }, `sync=disabled on ${syncOff.map((f) => f.name).join(', ')}: synchronous writes are acknowledged before they are durable.`)
        : null,
      table(
        [
          { title: 'Filesystem', cell: (sh) => sh.dataset },
          { title: 'Export path', cell: (sh) => h('code', null, sh.path) },
          { title: 'Rules', cell: (sh) => h('code', null, sh.rules) },
          { title: 'Dataset', cell: (sh) => (sh.read_only_dataset ? 'read-only' : 'read-write') },
        ],
        s.shares,
        'Nothing is shared.',
      ),
    ],
    h('a', { href: href('shares') }, 'Manage'),
  );
}
