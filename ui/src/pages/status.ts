// The Status page: the daemon (version, uptime, addresses), pool health and
// capacity, shares, and a minute of activity from the built-in analytics
// datasets, refreshed every few seconds.

import * as api from '../api';
import { h, replace } from '../dom';
import { fmtBytes, fmtCount, fmtDateTime, fmtDuration, fmtInt } from '../format';
import { every, type Page } from '../page';
import { href } from '../router';
import { capacityBar, healthBadge, messageOf, pageHead, panel, table } from '../widgets';

/** Built-in datasets shown as activity figures: name, title, formatter of a per-second rate. */
const ACTIVITY: [string, string, (v: number) => string][] = [
  ['nfs3.ops', 'NFS operations', (v) => `${fmtCount(v)} ops/s`],
  ['nfs3.bytes[op]', 'NFS read and write payload', (v) => `${fmtBytes(v)}/s`],
  ['net.bytes[direction]', 'NFS network traffic', (v) => `${fmtBytes(v)}/s`],
  ['io.ops[op]', 'Device I/O operations', (v) => `${fmtCount(v)} ops/s`],
  ['io.bytes[device]', 'Device I/O bytes', (v) => `${fmtBytes(v)}/s`],
];

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

  async function refreshActivity(): Promise<void> {
    const rows = await Promise.all(
      ACTIVITY.map(async ([name, title, fmt]) => {
        try {
          const d = await api.data({ name, seconds: 60 });
          const last = d.points[d.points.length - 1];
          const now = last ? last.total / last.seconds : 0;
          return h(
            'div',
            { class: 'activity-row' },
            h('a', { class: 'activity-title', href: href('analytics'), title: name }, title),
            h('span', { class: 'activity-now' }, fmt(now)),
            h('span', { class: 'activity-avg dim' }, `avg ${fmt(d.summary.average)} · max ${fmt(d.summary.max)}`),
          );
        } catch (e) {
          return h('div', { class: 'activity-row' }, h('span', { class: 'activity-title' }, title), h('span', { class: 'dim' }, messageOf(e)));
        }
      }),
    );
    replace(activity, rows);
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
