// The Pools page: per pool its health, capacity, the vdev tree with each device's
// state and error counters, log and cache devices, ARC and intent-log figures, a
// Scrub button (the API answers when the scrub is done), the progress of scrubs and
// resilvers, and the storage configuration of storage.ts: new pools, imports,
// exports, destroys, device replacement. Health changes show within two seconds.

import * as api from '../api';
import { h, type Child } from '../dom';
import { fmtBytes, fmtCount, fmtInt, fmtPercent, sig3 } from '../format';
import { every, type Page } from '../page';
import { busy, capacityBar, errorLine, healthBadge, loadInto, messageOf, pageHead, panel, toast } from '../widgets';
import { deviceTools, importPanel, newPoolPanel, operationLine, poolTools, type DevicePlace } from './storage';

/** Pools being scrubbed by this page, so a refresh keeps showing them busy. */
const scrubbing = new Set<string>();

export function poolsPage(): Page {
  const body = h('div', { class: 'pools' });
  // Outside the refreshed body, so a refresh does not wipe an error.
  const err = errorLine();
  const changed = () => {
    void refresh();
    void refreshOps();
  };
  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-pools' },
    pageHead('Pools', 'Storage pools, their devices and caches'),
    err.el,
    body,
    newPoolPanel(changed),
    importPanel(changed),
  );
  /** Operation lines by pool, filled by the fast poll below. */
  const opSlots = new Map<string, HTMLElement>();
  let ops: api.Operation[] = [];
  const refreshOps = async () => {
    try {
      ops = await api.operations();
    } catch {
      return;
    }
    for (const [pool, slot] of opSlots) {
      const op = ops.find((o) => o.pool === pool);
      slot.replaceChildren(...(op ? [operationLine(op)] : []));
    }
  };
  /** The health shown now (`healthOf`), so the watch below redraws only on a change. */
  let shownHealth = '';
  const render = (pools: api.PoolStatus[]) => {
    shownHealth = healthOf(pools);
    opSlots.clear();
    if (pools.length === 0) return h('div', { class: 'empty' }, 'No pool is imported.');
    const panels = pools.map(poolPanel);
    void refreshOps();
    return panels;
  };
  const refresh = () => loadInto(body, async () => render(await api.pools()));
  // A device that fails, a pool that degrades or suspends, errors that count up: shown
  // within two seconds rather than at the next full refresh, and without redrawing
  // the page while nothing of that changes.
  const watchHealth = async () => {
    let pools: api.PoolStatus[];
    try {
      pools = await api.pools();
    } catch {
      return;
    }
    if (healthOf(pools) !== shownHealth) await loadInto(body, async () => render(pools));
  };
  void refresh();
  const stop = every(10000, refresh);
  const stopHealth = every(2000, watchHealth);
  const stopOps = every(1000, refreshOps);
  return {
    el,
    dispose: () => {
      stop();
      stopHealth();
      stopOps();
    },
  };

  function poolPanel(p: api.PoolStatus): HTMLElement {
    const scrubButton = h('button', { 'data-test': 'scrub', 'data-pool': p.name }, 'Scrub');
    if (scrubbing.has(p.name)) {
      scrubButton.disabled = true;
      scrubButton.classList.add('busy');
      scrubButton.textContent = 'Scrubbing…';
    }
    scrubButton.addEventListener('click', async () => {
      err.clear();
      scrubbing.add(p.name);
      try {
        const s = await busy(scrubButton, 'Scrubbing…', () => api.scrub(p.name));
        toast(`Scrub of ${p.name} done: ${fmtBytes(s.bytes)} verified, ${fmtBytes(s.repaired_bytes)} repaired, ${s.errors} errors`);
        void refresh();
      } catch (e) {
        err.show(`Scrub of ${p.name}: ${messageOf(e)}`);
      } finally {
        scrubbing.delete(p.name);
      }
    });

    const facts: [string, Child][] = [
      ['Health', healthBadge(p.health)],
      ['Capacity', capacityBar(p.allocated_bytes, p.capacity_bytes)],
      ['Free', fmtBytes(p.free_bytes)],
      ['Transaction group', fmtInt(p.txg)],
      ['GUID', String(p.guid)],
      ['Unrecoverable reads', h('span', { class: p.unrecoverable_reads ? 'bad-text' : '' }, fmtInt(p.unrecoverable_reads))],
      ['Last scrub', p.last_scrub ? scrubText(p.last_scrub) : 'never'],
    ];

    const slot = h('div');
    opSlots.set(p.name, slot);
    return panel(
      [p.name, ' ', healthBadge(p.health)],
      [
        p.suspended ? h('div', { class: 'error-line' }, `Suspended: ${p.suspended}`) : null,
        slot,
        h('div', { class: 'pool-grid' },
          h('dl', { class: 'kv' }, facts.map(([k, v]) => [h('dt', null, k), h('dd', null, v)])),
          cacheFacts(p),
        ),
        h('h3', null, 'Devices'),
        vdevTable(p, changed),
      ],
      [scrubButton, ' ', ...poolTools(p, changed)],
      { 'data-test': 'pool', 'data-pool': p.name },
    );
  }
}

/** Pools' and devices' health, suspension and error counts: what an operator must see
 * change at once. */
function healthOf(pools: api.PoolStatus[]): string {
  const device = (d: api.Device) => [d.path, d.health, d.read_errors, d.write_errors, d.cksum_errors];
  return JSON.stringify(
    pools.map((p) => [
      p.name,
      p.health,
      p.suspended,
      p.unrecoverable_reads,
      p.vdevs.map((v) => [v.health, v.children.map(device)]),
      [p.log, p.cache, p.spares ?? []].map((devices) => devices.map(device)),
    ]),
  );
}

function scrubText(s: api.ScrubSummary): string {
  return `${fmtBytes(s.bytes)} in ${fmtInt(s.blocks)} blocks, ${sig3(s.seconds)} s; repaired ${fmtBytes(s.repaired_bytes)}, ${fmtInt(s.bad_copies)} bad copies, ${fmtInt(s.errors)} errors (txg ${s.finished_at_txg})`;
}

const num = (v: unknown): number => (typeof v === 'number' ? v : 0);

function cacheFacts(p: api.PoolStatus): HTMLElement {
  const a = p.arc;
  const l = p.intent_log;
  const hits = num(a.demand_hits);
  const lookups = hits + num(a.demand_misses);
  const rows: [string, string][] = [
    ['ARC size', `${fmtBytes(num(a.size_bytes))} of ${fmtBytes(num(a.max_bytes))}`],
    ['MRU / MFU', `${fmtBytes(num(a.mru_bytes))} / ${fmtBytes(num(a.mfu_bytes))}`],
    ['Demand hit ratio', lookups ? `${fmtPercent(hits, lookups)} of ${fmtCount(lookups)}` : '-'],
    ['Prefetch hits / misses', `${fmtCount(num(a.prefetch_hits))} / ${fmtCount(num(a.prefetch_misses))}`],
  ];
  if (p.l2arc) {
    for (const [k, v] of Object.entries(p.l2arc)) {
      rows.push([`L2ARC ${k.replace(/_/g, ' ')}`, k.endsWith('bytes') ? fmtBytes(num(v)) : fmtCount(num(v))]);
    }
  }
  rows.push(['Intent log', `${String(l.ring ?? '-')} ring, ${fmtBytes(num(l.ring_bytes))}`]);
  rows.push(['Log commits', `${fmtCount(num(l.commits))} (${fmtBytes(num(l.bytes_written))} written)`]);
  if (num(l.replay_failures)) rows.push(['Replay failures', fmtInt(num(l.replay_failures))]);
  return h('dl', { class: 'kv' }, rows.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

function vdevTable(p: api.PoolStatus, changed: () => void): HTMLElement {
  const head = h(
    'tr',
    null,
    ['Device', 'State', 'I/O', 'Read err', 'Write err', 'Cksum err', 'Reads', 'Writes', 'Read', 'Written', 'Repaired', ''].map((t, i) =>
      h('th', { class: i >= 3 ? 'num' : '' }, t),
    ),
  );
  const rows: HTMLElement[] = [];
  const group = (label: string, health: string, extra: string) =>
    h('tr', { class: 'vdev-group' }, h('td', null, label, extra ? h('span', { class: 'dim' }, ` ${extra}`) : null), h('td', null, health ? healthBadge(health) : null), h('td', { colspan: 10 }));
  const leaf = (d: api.Device, depth: number, place: DevicePlace) => {
    const e = (n: number) => h('td', { class: `num ${n ? 'bad-text' : ''}` }, fmtInt(n));
    return h(
      'tr',
      { class: 'vdev-leaf', 'data-test': 'device' },
      h('td', { style: `padding-left:${8 + depth * 18}px` }, h('code', null, d.path)),
      h('td', null, healthBadge(d.health)),
      h('td', { class: 'dim' }, d.io_mode),
      e(d.read_errors),
      e(d.write_errors),
      e(d.cksum_errors),
      h('td', { class: 'num' }, fmtCount(d.read_ops)),
      h('td', { class: 'num' }, fmtCount(d.write_ops)),
      h('td', { class: 'num' }, fmtBytes(d.read_bytes)),
      h('td', { class: 'num' }, fmtBytes(d.write_bytes)),
      h('td', { class: `num ${d.repaired_bytes ? 'warn-text' : ''}` }, fmtBytes(d.repaired_bytes)),
      h('td', null, deviceTools(p.name, d, place, changed)),
    );
  };
  rows.push(group(p.name, p.health, ''));
  for (const v of p.vdevs) {
    const single = v.children.length === 1 && (v.layout === 'disk' || v.layout === 'single');
    const place: DevicePlace = { role: 'data', layout: v.layout, redundant: v.layout !== 'disk' };
    if (single) {
      rows.push(leaf(v.children[0], 1, place));
      continue;
    }
    const r = group(`${v.layout}-${v.id}`, v.health, `${fmtBytes(v.capacity_bytes - v.free_bytes)} used of ${fmtBytes(v.capacity_bytes)}`);
    r.firstElementChild?.setAttribute('style', 'padding-left:26px');
    rows.push(r);
    for (const d of v.children) rows.push(leaf(d, 2, place));
  }
  if (p.log.length) {
    rows.push(group('logs', '', ''));
    for (const d of p.log) rows.push(leaf(d, 1, { role: 'log' }));
  }
  if (p.cache.length) {
    rows.push(group('cache', '', ''));
    for (const d of p.cache) rows.push(leaf(d, 1, { role: 'cache' }));
  }
  if (p.spares?.length) {
    rows.push(group('spares', '', 'take the place of a failed device by themselves'));
    for (const d of p.spares) rows.push(leaf(d, 1, { role: 'spare' }));
  }
  return h('table', { class: 'grid vdevs', 'data-test': 'vdev-tree' }, h('thead', null, head), h('tbody', null, rows));
}
