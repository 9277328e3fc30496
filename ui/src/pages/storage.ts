// Storage configuration on the Pools page: a new pool from candidate devices with
// every layout they allow side by side (usable capacity, streaming and random
// figures from the same model as `shoal plan`, asked of the API), importing exported
// pools, and per pool adding devices (data vdevs, log, cache, spares), exporting and
// destroying; per device replacing, clearing, attaching, detaching, taking offline and
// online, removing; with the progress of scrubs and resilvers. Everything that takes
// data or a device away asks first.

import * as api from '../api';
import { h } from '../dom';
import { fmtBytes, fmtDuration, fmtInt, sig3 } from '../format';
import { busy, confirmAction, dialog, errorLine, field, panel, toast } from '../widgets';

/** One layout the selected data devices allow: the model's name and the pool's words. */
export interface LayoutOption {
  plan: string;
  words: string[];
}

/** Every layout of `devs` (data devices) the way `shoal pool create` reads them. */
export function layoutsFor(devs: string[]): LayoutOption[] {
  const n = devs.length;
  const out: LayoutOption[] = [];
  if (n === 0) return out;
  const groups = (w: number) => Array.from({ length: n / w }, (_, g) => devs.slice(g * w, (g + 1) * w));
  out.push({ plan: `${n}stripe`, words: [...devs] });
  for (const ways of [2, 3]) {
    if (n >= ways && n % ways === 0) {
      out.push({ plan: `${n / ways}x${ways}mirror`, words: groups(ways).flatMap((g) => ['mirror', ...g]) });
    }
  }
  for (const parity of [1, 2, 3]) {
    for (let w = parity + 2; w <= n; w++) {
      if (n % w !== 0) continue;
      const kind = parity === 1 ? 'raidz' : `raidz${parity}`;
      out.push({ plan: `${n / w}x(${w - parity}+${parity})${kind}`, words: groups(w).flatMap((g) => [kind, ...g]) });
    }
  }
  return out;
}

const free = (c: api.Candidate) => c.pool_state === null || c.pool_state === 'destroyed';

/** The "New pool" panel; `created` runs after a pool is made. */
export function newPoolPanel(created: () => void): HTMLElement {
  const err = errorLine('new-pool-error');
  const name = h('input', { type: 'text', size: 12, placeholder: 'tank', 'data-test': 'new-pool-name' });
  const mbps = h('input', { type: 'number', min: 1, value: '150', size: 5, 'data-test': 'disk-mbps' });
  const iops = h('input', { type: 'number', min: 1, value: '150', size: 5, 'data-test': 'disk-iops' });
  const devicesEl = h('div', { 'data-test': 'candidates' });
  const layoutsEl = h('div', { 'data-test': 'layouts' });
  const create = h('button', { class: 'primary', 'data-test': 'create-pool', disabled: true }, 'Create pool…');
  let candidates: api.Candidate[] = [];
  let chosen: LayoutOption | null = null;
  const rows: { c: api.Candidate; use: HTMLInputElement; role: HTMLSelectElement }[] = [];

  const selected = (role: string) => rows.filter((r) => r.use.checked && r.role.value === role).map((r) => r.c);
  let generation = 0;
  const relayout = async () => {
    const mine = ++generation;
    chosen = null;
    create.disabled = true;
    const data = selected('data');
    const options = layoutsFor(data.map((c) => c.path));
    if (options.length === 0) {
      layoutsEl.replaceChildren(h('div', { class: 'dim' }, 'Choose data devices to see the layouts they allow.'));
      return;
    }
    const size = Math.min(...data.map((c) => c.size_bytes));
    try {
      const predictions = await Promise.all(options.map((o) => api.plan(o.plan, Number(mbps.value), Number(iops.value), size)));
      if (mine !== generation) return;
      const body = options.map((o, i) => {
        const p = predictions[i];
        const radio = h('input', { type: 'radio', name: 'layout', 'data-test': 'layout-choose' });
        radio.addEventListener('change', () => {
          chosen = o;
          create.disabled = false;
        });
        return h(
          'tr',
          {
            'data-test': 'layout-option',
            'data-layout': o.plan,
            'data-usable': String(p.usable_bytes ?? 0),
            'data-read': String(p.streaming_read_mb_per_s),
            'data-write': String(p.streaming_write_mb_per_s),
            'data-iops': String(p.random_read_iops),
          },
          h('td', null, h('label', null, radio, ' ', h('code', null, o.plan))),
          h('td', { class: 'num' }, fmtBytes(p.usable_bytes ?? 0)),
          h('td', { class: 'num' }, `${sig3(p.streaming_read_mb_per_s)} MB/s`),
          h('td', { class: 'num' }, `${sig3(p.streaming_write_mb_per_s)} MB/s`),
          h('td', { class: 'num' }, `${fmtInt(p.random_read_iops)} IOPS`),
        );
      });
      layoutsEl.replaceChildren(
        h(
          'table',
          { class: 'grid' },
          h('thead', null, h('tr', null, ['Layout', 'Usable', 'Streaming read', 'Streaming write', 'Random reads'].map((t, i) => h('th', { class: i ? 'num' : '' }, t)))),
          h('tbody', null, body),
        ),
        h('div', { class: 'dim' }, 'Predicted by the model of shoal plan from each disk\'s figures above; usable capacity before metadata and labels.'),
      );
    } catch (e) {
      err.show(e);
    }
  };
  mbps.addEventListener('change', relayout);
  iops.addEventListener('change', relayout);

  const load = async () => {
    candidates = (await api.candidates()).filter(free);
    rows.length = 0;
    const trs = candidates.map((c) => {
      const use = h('input', { type: 'checkbox', 'data-test': 'candidate-use' });
      const role = h('select', { 'data-test': 'candidate-role' }, ['data', 'log', 'cache', 'spare'].map((r) => h('option', { value: r }, r)));
      use.addEventListener('change', relayout);
      role.addEventListener('change', relayout);
      rows.push({ c, use, role });
      return h(
        'tr',
        { 'data-test': 'candidate', 'data-path': c.path },
        h('td', null, h('label', null, use, ' ', h('code', null, c.path))),
        h('td', { class: 'dim' }, c.kind),
        h('td', { class: 'num' }, fmtBytes(c.size_bytes)),
        h('td', null, role),
      );
    });
    devicesEl.replaceChildren(
      trs.length
        ? h('table', { class: 'grid' }, h('thead', null, h('tr', null, ['Device', 'Kind', 'Size', 'Role'].map((t) => h('th', null, t)))), h('tbody', null, trs))
        : h('div', { class: 'empty' }, 'No free devices: add device files to a device directory (shoal serve --device-dir) or attach disks.'),
    );
    void relayout();
  };

  create.addEventListener('click', () => {
    err.clear();
    const poolName = name.value.trim();
    if (!poolName || !chosen) {
      err.show('Give the pool a name and choose a layout.');
      return;
    }
    const words = [...chosen.words];
    const logs = selected('log').map((c) => c.path);
    const caches = selected('cache').map((c) => c.path);
    if (logs.length) words.push('log', ...logs);
    if (caches.length) words.push('cache', ...caches);
    const spares = selected('spare').map((c) => c.path);
    if (spares.length) words.push('spare', ...spares);
    confirmAction(
      `Create pool ${poolName}`,
      [
        `${chosen.plan} from ${selected('data').length} devices`,
        logs.length ? `, ${logs.length} log` : '',
        caches.length ? `, ${caches.length} cache` : '',
        spares.length ? `, ${spares.length} spare` : '',
        '. Whatever those devices hold is overwritten.',
      ],
      'Create',
      async () => {
        await api.createPool(poolName, words);
        toast(`Pool ${poolName} created`);
        name.value = '';
        await load();
        created();
      },
    );
  });
  void load();
  return panel(
    'New pool',
    [
      err.el,
      h('div', { class: 'form-row' }, field('Name', name), field('Disk MB/s', mbps), field('Disk IOPS', iops)),
      h('h3', null, 'Devices'),
      devicesEl,
      h('h3', null, 'Layouts'),
      layoutsEl,
    ],
    create,
    { 'data-test': 'new-pool' },
  );
}

/** Exported pools found on the candidate devices, each with an Import button. */
export function importPanel(imported: () => void): HTMLElement {
  const body = h('div');
  const load = async () => {
    const found = new Map<string, api.Candidate[]>();
    for (const c of await api.candidates()) {
      if (c.pool && c.pool_state === 'exported' && !c.in_use) found.set(c.pool, [...(found.get(c.pool) ?? []), c]);
    }
    if (found.size === 0) {
      body.replaceChildren(h('div', { class: 'dim' }, 'No exported pool on the candidate devices.'));
      return;
    }
    body.replaceChildren(
      ...[...found].map(([pool, devs]) => {
        const button = h('button', { 'data-test': 'import', 'data-pool': pool }, 'Import…');
        button.addEventListener('click', () =>
          confirmAction(`Import pool ${pool}`, `From ${devs.length} devices; its shares are served again.`, 'Import', async () => {
            const dir = devs[0].path.slice(0, devs[0].path.lastIndexOf('/')) || '/';
            await api.importPool(dir, pool);
            toast(`Pool ${pool} imported`);
            await load();
            imported();
          }),
        );
        return h('div', { class: 'form-row', 'data-test': 'importable', 'data-pool': pool }, h('code', null, pool), h('span', { class: 'dim' }, ` ${devs.length} devices `), button);
      }),
    );
  };
  void load();
  return panel('Import', body, null, { 'data-test': 'import-panel' });
}

/** Add devices, Export and Destroy buttons for a pool. */
export function poolTools(p: api.PoolStatus, changed: () => void): HTMLElement[] {
  const add = h('button', { 'data-test': 'add-devices', 'data-pool': p.name }, 'Add devices…');
  add.addEventListener('click', () => addDialog(p, changed));
  const exp = h('button', { 'data-test': 'export', 'data-pool': p.name }, 'Export…');
  exp.addEventListener('click', () =>
    confirmAction(`Export pool ${p.name}`, 'Its shares stop until it is imported again; clients see errors meanwhile.', 'Export', async () => {
      await api.exportPool(p.name);
      toast(`Pool ${p.name} exported`);
      changed();
    }),
  );
  const destroy = h('button', { class: 'danger', 'data-test': 'destroy', 'data-pool': p.name }, 'Destroy…');
  destroy.addEventListener('click', () =>
    confirmAction(`Destroy pool ${p.name}`, 'Every filesystem, snapshot and share in it is gone for good; its devices are wiped.', 'Destroy', async () => {
      await api.destroyPool(p.name);
      toast(`Pool ${p.name} destroyed`);
      changed();
    }),
  );
  return [add, exp, destroy];
}

/** How the devices chosen in the Add dialog join the pool, in `shoal pool add` words. */
const ADD_KINDS: [string, string][] = [
  ['mirror', 'one mirror vdev'],
  ['raidz1', 'one raidz1 vdev'],
  ['raidz2', 'one raidz2 vdev'],
  ['disk', 'plain disk vdevs (no redundancy)'],
  ['log', 'log devices (fast synchronous writes)'],
  ['cache', 'cache devices (second-level read cache)'],
  ['spare', 'hot spares'],
];

async function addDialog(p: api.PoolStatus, changed: () => void): Promise<void> {
  const err = errorLine('add-error');
  const choices = (await api.candidates()).filter(free);
  const kind = h('select', { 'data-test': 'add-kind' }, ADD_KINDS.map(([k, label]) => h('option', { value: k }, label)));
  const boxes = choices.map((c) => {
    const use = h('input', { type: 'checkbox', 'data-test': 'add-use' }) as HTMLInputElement;
    return { c, use, row: h('label', { class: 'check', 'data-test': 'add-candidate', 'data-path': c.path }, use, ` ${c.path} (${fmtBytes(c.size_bytes)})`) };
  });
  const go = h('button', { class: 'primary', 'data-test': 'add-go' }, 'Add');
  const cancel = h('button', null, 'Cancel');
  const dlg = dialog(
    `Add devices to ${p.name}`,
    [
      choices.length ? h('div', null, boxes.map((b) => h('div', null, b.row))) : h('div', { class: 'empty' }, 'No free device to add.'),
      field('Add them as', kind),
      h('div', { class: 'dim' }, 'Data vdevs grow the pool at once; they cannot be removed again. Log, cache and spare devices can.'),
      err.el,
    ],
    [cancel, go],
    'add-dialog',
  );
  cancel.addEventListener('click', () => dlg.close());
  go.addEventListener('click', async () => {
    err.clear();
    const paths = boxes.filter((b) => b.use.checked).map((b) => b.c.path);
    if (!paths.length) {
      err.show(new Error('Choose at least one device.'));
      return;
    }
    const words = kind.value === 'disk' ? paths : [kind.value, ...paths];
    try {
      await busy(go, 'Adding…', () => api.addDevices(p.name, words));
      dlg.close();
      toast(`Added ${paths.length} device${paths.length > 1 ? 's' : ''} to ${p.name}`);
      changed();
    } catch (e) {
      err.show(e);
    }
  });
}

/** Where a device sits: a data vdev (its layout, whether it tolerates losing one), or
 * the pool's log, cache or spare devices. */
export interface DevicePlace {
  role: 'data' | 'log' | 'cache' | 'spare';
  layout?: string;
  redundant?: boolean;
}

/** The buttons for one device: replace, clear, attach, detach, offline and online for
 * data devices as their vdev allows; remove for log, cache and spare devices, and
 * clear for a FAULTED log or cache device. */
export function deviceTools(pool: string, d: api.Device, place: DevicePlace, changed: () => void): HTMLElement {
  const tools: HTMLElement[] = [];
  const button = (test: string, label: string) => {
    const b = h('button', { class: 'small', 'data-test': test, 'data-path': d.path }, label);
    tools.push(b);
    return b;
  };
  const failed = (what: string) => (e: unknown) => toast(`${what} ${d.path}: ${e instanceof Error ? e.message : String(e)}`);
  if ((place.role === 'log' || place.role === 'cache') && d.health === 'FAULTED') {
    // A cache device goes back in service as it is; a log device is removed and added
    // again, empty, with the intent log moved back onto it.
    const clear = button('clear', 'Clear');
    clear.addEventListener('click', async () => {
      try {
        await busy(clear, 'Clearing…', () => api.clearDevice(pool, d.path));
        toast(place.role === 'log' ? `${d.path} is back, empty, with the intent log on it` : `${d.path} is back in service`);
      } catch (e) {
        failed('Clearing')(e);
      }
      changed();
    });
  }
  if (place.role !== 'data') {
    button('remove', 'Remove…').addEventListener('click', () =>
      confirmAction(
        `Remove ${place.role} device ${d.path}`,
        place.role === 'log' ? 'The intent log moves to the other log devices, or into the pool, first: nothing is lost.' : 'It holds no data the pool needs.',
        'Remove',
        async () => {
          await api.removeDevice(pool, d.path);
          toast(`${d.path} removed from ${pool}`);
          changed();
        },
      ),
    );
    return h('span', { class: 'device-tools' }, tools);
  }
  if (place.redundant) {
    button('replace', 'Replace…').addEventListener('click', () => pickDevice(`Replace ${d.path}`, 'replace', 'Replace and resilver', async (added) => {
      const s = await api.replaceDevice(pool, d.path, added);
      toast(`${d.path} replaced: ${fmtBytes(s.bytes_written)} resilvered in ${sig3(s.seconds)} s`);
    }, changed, failed('Replacing')));
  }
  if (place.layout === 'disk' || place.layout === 'mirror') {
    button('attach', 'Attach…').addEventListener('click', () => pickDevice(`Attach a side beside ${d.path}`, 'attach', 'Attach and resilver', async (added) => {
      const s = await api.attachDevice(pool, d.path, added);
      toast(`${added} attached: ${fmtBytes(s.bytes_written)} resilvered in ${sig3(s.seconds)} s`);
    }, changed, failed('Attaching beside')));
  }
  if (place.layout === 'mirror') {
    button('detach', 'Detach…').addEventListener('click', () =>
      confirmAction(`Detach ${d.path}`, 'The mirror keeps its other sides; this device leaves the pool and its labels are wiped.', 'Detach', async () => {
        await api.detachDevice(pool, d.path);
        toast(`${d.path} detached`);
        changed();
      }),
    );
  }
  if (d.health === 'FAULTED' && place.redundant) {
    const clear = button('clear', 'Clear');
    clear.addEventListener('click', async () => {
      try {
        const s = await busy(clear, 'Resilvering…', () => api.clearDevice(pool, d.path));
        toast(`${d.path} is back: ${fmtBytes(s.bytes_written)} resilvered`);
      } catch (e) {
        failed('Clearing')(e);
      }
      changed();
    });
  }
  if (d.health === 'ONLINE' && place.redundant) {
    button('offline', 'Offline…').addEventListener('click', () =>
      confirmAction(`Take ${d.path} offline`, 'The vdev runs degraded on its other devices until it is brought online again (and resilvered).', 'Offline', async () => {
        await api.offlineDevice(pool, d.path);
        toast(`${d.path} is offline`);
        changed();
      }),
    );
  }
  if (d.health === 'OFFLINE') {
    const online = button('online', 'Online');
    online.addEventListener('click', async () => {
      try {
        const work = api.onlineDevice(pool, d.path);
        changed();
        const s = await busy(online, 'Resilvering…', () => work);
        toast(`${d.path} is online: ${fmtBytes(s.bytes_written)} resilvered`);
      } catch (e) {
        failed('Bringing online')(e);
      }
      changed();
    });
  }
  return h('span', { class: 'device-tools' }, tools);
}

/** A dialog choosing a free device for `act` (replace, attach); the dialog closes at
 * once and the resilver's progress shows on the pool. */
async function pickDevice(
  title: string,
  test: string,
  goLabel: string,
  act: (device: string) => Promise<void>,
  changed: () => void,
  failed: (e: unknown) => void,
): Promise<void> {
  const err = errorLine(`${test}-error`);
  const choices = (await api.candidates()).filter(free);
  const select = h('select', { 'data-test': `${test}-with` }, choices.map((c) => h('option', { value: c.path }, `${c.path} (${fmtBytes(c.size_bytes)})`)));
  const go = h('button', { class: 'primary', 'data-test': `${test}-go` }, goLabel);
  const cancel = h('button', null, 'Cancel');
  const dlg = dialog(title, [choices.length ? field('New device', select) : h('div', { class: 'empty' }, 'No free device.'), err.el], [cancel, go], `${test}-dialog`);
  cancel.addEventListener('click', () => dlg.close());
  go.addEventListener('click', async () => {
    err.clear();
    const work = act(select.value);
    dlg.close();
    changed();
    try {
      await work;
    } catch (e) {
      failed(e);
    }
    changed();
  });
}

/** A scrub's or resilver's progress, with rate and time left. */
export function operationLine(op: api.Operation): HTMLElement {
  const pct = op.bytes_total ? Math.min(100, (100 * op.bytes_done) / op.bytes_total) : 0;
  return h(
    'div',
    { class: 'operation', 'data-test': 'operation', 'data-pool': op.pool, 'data-kind': op.kind },
    h('strong', null, op.kind === 'resilver' ? `Resilvering ${op.device ?? ''}` : 'Scrubbing'),
    ` ${sig3(pct)}% (${fmtBytes(op.bytes_done)} of ${fmtBytes(op.bytes_total)}), ${fmtBytes(op.rate)}/s`,
    op.seconds_left !== null ? `, ${fmtDuration(op.seconds_left)} left` : '',
    h('div', { class: 'capacity-bar' }, h('div', { class: 'capacity-fill ok', style: `width:${pct.toFixed(1)}%` })),
  );
}
