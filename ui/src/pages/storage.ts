// Storage configuration on the Pools page: a new pool from candidate devices with
// every layout they allow side by side (usable capacity, streaming and random
// figures from the same model as `shoal plan`, asked of the API), importing exported
// pools, and per pool exporting, destroying, replacing and clearing devices, with the
// progress of scrubs and resilvers. Everything that writes asks first.

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

/** Export and Destroy buttons for a pool. */
export function poolTools(p: api.PoolStatus, changed: () => void): HTMLElement[] {
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
  return [exp, destroy];
}

/** Replace (and, for a FAULTED device, Clear) buttons for one data device. */
export function deviceTools(pool: string, d: api.Device, changed: () => void): HTMLElement {
  const replace = h('button', { class: 'small', 'data-test': 'replace', 'data-path': d.path }, 'Replace…');
  replace.addEventListener('click', async () => {
    const err = errorLine('replace-error');
    const choices = (await api.candidates()).filter(free);
    const select = h('select', { 'data-test': 'replace-with' }, choices.map((c) => h('option', { value: c.path }, `${c.path} (${fmtBytes(c.size_bytes)})`)));
    const go = h('button', { class: 'primary', 'data-test': 'replace-go' }, 'Replace and resilver');
    const cancel = h('button', null, 'Cancel');
    const dlg = dialog(
      `Replace ${d.path}`,
      [choices.length ? field('New device', select) : h('div', { class: 'empty' }, 'No free device to replace it with.'), err.el],
      [cancel, go],
      'replace-dialog',
    );
    cancel.addEventListener('click', () => dlg.close());
    go.addEventListener('click', async () => {
      err.clear();
      try {
        // The dialog closes at once: the resilver's progress shows on the pool.
        const work = api.replaceDevice(pool, d.path, select.value);
        dlg.close();
        changed();
        const s = await work;
        toast(`${d.path} replaced: ${fmtBytes(s.bytes_written)} resilvered in ${sig3(s.seconds)} s`);
      } catch (e) {
        toast(`Replacing ${d.path}: ${e instanceof Error ? e.message : String(e)}`);
      }
      changed();
    });
  });
  if (d.health !== 'FAULTED') return replace;
  const clear = h('button', { class: 'small', 'data-test': 'clear', 'data-path': d.path }, 'Clear');
  clear.addEventListener('click', async () => {
    try {
      const s = await busy(clear, 'Resilvering…', () => api.clearDevice(pool, d.path));
      toast(`${d.path} is back: ${fmtBytes(s.bytes_written)} resilvered`);
    } catch (e) {
      toast(`Clearing ${d.path}: ${e instanceof Error ? e.message : String(e)}`);
    }
    changed();
  });
  return h('span', null, replace, ' ', clear);
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
