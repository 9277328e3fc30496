// The Replication page: this appliance's filesystems copied to other shoal daemons
// (targets and actions, with live progress, lag and history), and the other side:
// credentials that let another appliance replicate here, and the replicas held here
// with promotion for failover.

import * as api from '../api';
import { h, setOptions } from '../dom';
import { fmtBytes, fmtDateTime, fmtDuration } from '../format';
import { every, type Page } from '../page';
import { busy, confirmAction, dialog, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

function schedule(a: api.ReplicationAction): string {
  if (a.continuous) return 'continuous';
  const when: string[] = [];
  if (a.interval_seconds > 0) when.push(`every ${fmtDuration(a.interval_seconds)}`);
  if (a.follow_schedules) when.push('after scheduled snapshots');
  return when.length ? when.join(', ') : 'on demand';
}

function lastRun(a: api.ReplicationActionStatus): HTMLElement {
  if (a.running) {
    const r = a.running;
    return h(
      'span',
      { 'data-test': 'repl-state', 'data-state': 'running' },
      `sending ${r.snapshot.split('@')[1] ?? r.snapshot}: ${fmtBytes(r.bytes)} at ${fmtBytes(r.rate)}/s`,
    );
  }
  const last = a.history[0];
  if (!last) return h('span', { class: 'dim', 'data-test': 'repl-state', 'data-state': 'never' }, 'never run');
  const when = fmtDateTime(last.finished_unix);
  if (!last.ok) {
    return h('span', { class: 'danger-text', 'data-test': 'repl-state', 'data-state': 'failed', title: last.error ?? '' }, `failed ${when}: ${last.error ?? ''}`);
  }
  const how = last.base ? `since ${last.base.split('@')[1]}` : 'in full';
  return h(
    'span',
    { 'data-test': 'repl-state', 'data-state': 'ok' },
    `ok ${when}: ${fmtBytes(last.bytes)} ${how}, ${last.streams} snapshot${last.streams === 1 ? '' : 's'}`,
  );
}

export function replicationPage(): Page {
  const actionsEl = h('div');
  const targetsEl = h('div');
  const credentialsEl = h('div');
  const replicasEl = h('div');

  // --- a new action --------------------------------------------------------------
  const actionErr = errorLine('repl-action-error');
  const fsSelect = h('select', { 'data-test': 'repl-fs' });
  const targetSelect = h('select', { 'data-test': 'repl-target' });
  const remote = h('input', { type: 'text', size: 22, placeholder: 'the same name', 'data-test': 'repl-remote' });
  const interval = h('input', { type: 'number', min: 0, size: 6, placeholder: 'on demand', 'data-test': 'repl-every' });
  const continuous = h('input', { type: 'checkbox', 'data-test': 'repl-continuous' });
  const followSchedules = h('input', {
    type: 'checkbox',
    'data-test': 'repl-follow-schedules',
    title: 'run after each snapshot a snapshot schedule (Filesystems page) takes of the filesystem',
  });
  const bandwidth = h('input', { type: 'number', min: 0, size: 6, placeholder: 'unlimited', 'data-test': 'repl-bandwidth' });
  const alertLag = h('input', { type: 'number', min: 0, size: 6, placeholder: 'default', title: 'alert when the target is this many seconds behind (0: never; default: three intervals, at least 300 s)', 'data-test': 'repl-alert-lag' });
  const addAction = h('button', { class: 'primary', type: 'submit', 'data-test': 'repl-add' }, 'Replicate');
  const actionForm = h(
    'form',
    { class: 'form-row' },
    field('Filesystem', fsSelect),
    field('Target', targetSelect),
    field('On the target', remote),
    field('Every (s)', interval),
    field('Continuous', continuous),
    field('After schedules', followSchedules),
    field('MB/s', bandwidth),
    field('Alert lag (s)', alertLag),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), addAction),
  );
  actionForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    actionErr.clear();
    try {
      const a = await busy(addAction, 'Adding…', () =>
        api.addAction({
          filesystem: fsSelect.value,
          target: targetSelect.value,
          remote: remote.value.trim() || undefined,
          interval_seconds: interval.value ? Number(interval.value) : undefined,
          continuous: continuous.checked,
          follow_schedules: followSchedules.checked,
          bandwidth: bandwidth.value ? Math.round(Number(bandwidth.value) * 1e6) : undefined,
          alert_lag_seconds: alertLag.value ? Number(alertLag.value) : undefined,
        }),
      );
      toast(`${a.filesystem} replicates to ${a.target} as ${a.remote}`);
      remote.value = '';
      await refresh();
    } catch (e) {
      actionErr.show(e);
    }
  });

  // --- a new target -----------------------------------------------------------------
  const targetErr = errorLine('repl-target-error');
  const tName = h('input', { type: 'text', size: 12, 'data-test': 'target-name' });
  const tAddress = h('input', { type: 'text', size: 22, placeholder: 'host:port of its API', 'data-test': 'target-address' });
  const tCredential = h('input', { type: 'password', size: 24, placeholder: 'made on the target', 'data-test': 'target-credential' });
  const tCert = h('textarea', { rows: 2, cols: 30, placeholder: '-----BEGIN CERTIFICATE----- (its API certificate; empty: plain HTTP)', 'data-test': 'target-certificate' });
  const addTarget = h('button', { class: 'primary', type: 'submit', 'data-test': 'target-add' }, 'Add target');
  const targetForm = h(
    'form',
    { class: 'form-row' },
    field('Name', tName),
    field('Address', tAddress),
    field('Credential', tCredential),
    field('Certificate', tCert),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), addTarget),
  );
  targetForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    targetErr.clear();
    try {
      const t = await busy(addTarget, 'Adding…', () =>
        api.addTarget({
          name: tName.value.trim(),
          address: tAddress.value.trim(),
          credential: tCredential.value.trim(),
          certificate: tCert.value.trim() || undefined,
        }),
      );
      toast(`Target ${t.name} added`);
      for (const i of [tName, tAddress, tCredential, tCert]) i.value = '';
      await refresh();
    } catch (e) {
      targetErr.show(e);
    }
  });

  // --- a new credential ---------------------------------------------------------------
  const credErr = errorLine('credential-error');
  const cName = h('input', { type: 'text', size: 16, placeholder: 'who replicates here', 'data-test': 'credential-name' });
  const makeCred = h('button', { class: 'primary', type: 'submit', 'data-test': 'credential-create' }, 'Make credential');
  const credForm = h(
    'form',
    { class: 'form-row' },
    field('Name', cName),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), makeCred),
  );
  credForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    credErr.clear();
    try {
      const c = await busy(makeCred, 'Making…', () => api.createCredential(cName.value.trim()));
      cName.value = '';
      const close = h('button', { class: 'primary', 'data-test': 'credential-done' }, 'Done');
      const d = dialog(
        `Credential ${c.name}`,
        [
          h('p', null, 'Give this token to the appliance that replicates here (its Replication page, Add target). It is shown this once.'),
          h('pre', { class: 'token', 'data-test': 'credential-token' }, c.token),
        ],
        close,
        'credential-dialog',
      );
      close.addEventListener('click', () => d.close());
      await refresh();
    } catch (e) {
      credErr.show(e);
    }
  });

  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-replication' },
    pageHead('Replication', 'Filesystems copied snapshot by snapshot to other shoal appliances, and the replicas held here'),
    panel('Replication actions', [actionsEl, h('h3', null, 'Replicate a filesystem'), actionForm, actionErr.el]),
    panel('Targets', [targetsEl, targetForm, targetErr.el]),
    panel('Replicas held here', replicasEl),
    panel('Credentials other appliances replicate here with', [credentialsEl, credForm, credErr.el]),
  );

  function removeAction(a: api.ReplicationAction): void {
    confirmAction('Remove replication', ['Stop replicating ', h('b', null, a.filesystem), ` to ${a.target}? Snapshots stay on both sides.`], 'Remove', async () => {
      await api.deleteAction(a.id);
      toast(`Replication of ${a.filesystem} to ${a.target} removed`);
      await refresh();
    });
  }

  async function runNow(a: api.ReplicationAction, button: HTMLButtonElement): Promise<void> {
    try {
      const r = await busy(button, 'Running…', () => api.runAction(a.id));
      toast(r.ok ? `${a.filesystem}: ${fmtBytes(r.bytes)} sent` : `${a.filesystem}: ${r.error ?? 'failed'}`);
    } catch (e) {
      toast((e as Error).message);
    }
    await refresh();
  }

  function promote(fs: string): void {
    confirmAction(
      'Promote replica',
      ['Make ', h('b', null, fs), ' an ordinary writable filesystem? Streams from its source are refused from now on; share it read-write to serve its clients (their file handles stay valid).'],
      'Promote',
      async () => {
        await api.promote(fs);
        toast(`${fs} promoted`);
        await refresh();
      },
    );
  }

  async function refresh(): Promise<void> {
    const loaded = api.replication();
    const fss = api.filesystems();
    await loadInto(actionsEl, async () => {
      const o = await loaded;
      return table(
        [
          { title: 'Filesystem', cell: (a) => h('b', null, a.filesystem) },
          { title: 'To', cell: (a) => `${a.target}: ${a.remote}` },
          { title: 'Schedule', cell: (a) => schedule(a) },
          { title: 'Lag', cell: (a) => (a.lag_seconds === null ? '-' : fmtDuration(a.lag_seconds)), class: 'num' },
          { title: 'Last run', cell: (a) => lastRun(a) },
          {
            title: '',
            class: 'actions',
            cell: (a) => {
              const run = h('button', { class: 'small', 'data-test': 'repl-run', disabled: a.running !== null }, 'Run now');
              run.addEventListener('click', () => void runNow(a, run));
              return [run, h('button', { class: 'small danger-text', 'data-test': 'repl-remove', onclick: () => removeAction(a) }, 'Remove')];
            },
          },
        ],
        o.actions,
        'Nothing is replicated from here.',
        (a) => ({ 'data-test': 'repl-row', 'data-fs': a.filesystem, 'data-target': a.target }),
      );
    });
    await loadInto(targetsEl, async () => {
      const o = await loaded;
      setOptions(
        targetSelect,
        o.targets.map((t): [string, string] => [t.name, t.name]),
      );
      return table(
        [
          { title: 'Target', cell: (t) => h('b', null, t.name) },
          { title: 'Address', cell: (t) => `${t.tls ? 'https' : 'http'}://${t.address}` },
          {
            title: '',
            class: 'actions',
            cell: (t) =>
              h(
                'button',
                {
                  class: 'small danger-text',
                  'data-test': 'target-remove',
                  onclick: () =>
                    confirmAction('Remove target', ['Remove target ', h('b', null, t.name), '?'], 'Remove', async () => {
                      await api.deleteTarget(t.name);
                      await refresh();
                    }),
                },
                'Remove',
              ),
          },
        ],
        o.targets,
        'No targets.',
        (t) => ({ 'data-test': 'target-row', 'data-name': t.name }),
      );
    });
    await loadInto(replicasEl, async () => {
      const o = await loaded;
      const rows = Object.entries(o.incoming);
      return table(
        [
          { title: 'Replica', cell: ([fs]) => h('b', null, fs) },
          { title: 'From', cell: ([, r]) => r.credential ?? 'any (demoted)' },
          { title: 'Latest snapshot', cell: ([, r]) => r.last_snapshot?.split('@')[1] ?? '-' },
          { title: 'Received', cell: ([, r]) => (r.last_received_unix ? fmtDateTime(r.last_received_unix) : '-') },
          {
            title: '',
            class: 'actions',
            cell: ([fs]) => h('button', { class: 'small', 'data-test': 'replica-promote', onclick: () => promote(fs) }, 'Promote'),
          },
        ],
        rows,
        'No replicas are held here.',
        ([fs]) => ({ 'data-test': 'replica-row', 'data-name': fs }),
      );
    });
    await loadInto(credentialsEl, async () => {
      const o = await loaded;
      return table(
        [
          { title: 'Credential', cell: (c) => h('b', null, c.name) },
          { title: 'Made', cell: (c) => fmtDateTime(c.created_unix) },
          {
            title: '',
            class: 'actions',
            cell: (c) =>
              h(
                'button',
                {
                  class: 'small danger-text',
                  'data-test': 'credential-remove',
                  onclick: () =>
                    confirmAction('Remove credential', ['Refuse streams sent with ', h('b', null, c.name), ' from now on?'], 'Remove', async () => {
                      await api.deleteCredential(c.name);
                      await refresh();
                    }),
                },
                'Remove',
              ),
          },
        ],
        o.credentials,
        'No credentials: nobody replicates here.',
      );
    });
    try {
      const list = (await fss).filter((f) => f.name.includes('/'));
      setOptions(
        fsSelect,
        list.map((f): [string, string] => [f.name, f.name]),
        list[0]?.name,
      );
    } catch {
      // The actions panel shows the daemon's error already.
    }
  }

  void refresh();
  // Progress and lag move on their own.
  const stop = every(2000, refresh);
  return { el, dispose: stop };
}
