// The iSCSI page: block volumes and the targets that serve them. Volumes are made
// (name, size, thick or sparse), listed with their size, space and the target
// that exports them, and destroyed; targets are made (name, LUNs in the order the
// volumes are picked, allowed initiators, CHAP and mutual CHAP), listed with their
// LUNs, identities, sessions and portals, and destroyed. Secrets go to the daemon
// once and are never shown again. A daemon serving no iSCSI says so here.

import * as api from '../api';
import { h } from '../dom';
import { fmtBytes } from '../format';
import { every, type Page } from '../page';
import { busy, confirmAction, errorLine, field, loadInto, pageHead, panel, table, toast } from '../widgets';

function propOf(v: api.Filesystem, name: string): string {
  return v.props.find((p) => p.property === name)?.value ?? '';
}

function words(s: string): string[] {
  return s.split(/[\s,]+/).filter((w) => w.length > 0);
}

export function iscsiPage(): Page {
  const volErr = errorLine('volume-error');
  const volName = h('input', { type: 'text', placeholder: 'pool/name', size: 24, 'data-test': 'volume-name', required: true, spellcheck: false });
  const volSize = h('input', { type: 'text', placeholder: '10G', size: 8, 'data-test': 'volume-size', required: true });
  const volSparse = h('input', { type: 'checkbox', 'data-test': 'volume-sparse' });
  const volSubmit = h('button', { class: 'primary', type: 'submit', 'data-test': 'volume-create' }, 'Create');
  const volForm = h(
    'form',
    { class: 'form-row', 'data-test': 'volume-form' },
    field('Name', volName),
    field('Size', volSize, 'bytes, or with K, M, G, T'),
    field('Sparse', volSparse, 'no space reserved up front'),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), volSubmit),
  );
  volForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    volErr.clear();
    const name = volName.value.trim();
    try {
      await busy(volSubmit, 'Creating…', () => api.createVolume(name, volSize.value.trim(), volSparse.checked));
      toast(`Volume ${name} created`);
      volName.value = '';
      await refresh();
    } catch (e) {
      volErr.show(e);
    }
  });

  const tgtErr = errorLine('target-error');
  const tgtName = h('input', { type: 'text', placeholder: 'iqn.2026-12.org.example:vm1', size: 36, 'data-test': 'target-name', required: true, spellcheck: false });
  const tgtLuns = h('select', { multiple: true, size: 4, 'data-test': 'target-luns', required: true });
  const tgtAllow = h('input', { type: 'text', placeholder: 'any initiator', size: 36, 'data-test': 'target-allow', spellcheck: false });
  const chapUser = h('input', { type: 'text', placeholder: 'none', size: 14, 'data-test': 'target-chap-user', autocomplete: 'off' });
  const chapSecret = h('input', { type: 'password', size: 16, 'data-test': 'target-chap-secret', autocomplete: 'new-password' });
  const tgtSubmit = h('button', { class: 'primary', type: 'submit', 'data-test': 'target-create' }, 'Create');
  const tgtForm = h(
    'form',
    { class: 'form-row', 'data-test': 'target-form' },
    field('Target name', tgtName),
    field('LUNs', tgtLuns, 'LUN 0, 1, ... in the order listed'),
    field('Allowed initiators', tgtAllow, 'IQNs separated by spaces'),
    field('CHAP user', chapUser),
    field('CHAP secret', chapSecret, '12 to 255 characters'),
    h('div', { class: 'field' }, h('span', { class: 'field-label' }, '\u00a0'), tgtSubmit),
  );
  tgtForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    tgtErr.clear();
    const name = tgtName.value.trim();
    const luns: Record<string, string> = {};
    Array.from(tgtLuns.selectedOptions).forEach((o, i) => {
      luns[String(i)] = o.value;
    });
    const spec: api.NewIscsiTarget = { name, luns, allow: words(tgtAllow.value) };
    if (chapUser.value.trim()) spec.chap = { user: chapUser.value.trim(), secret: chapSecret.value };
    try {
      await busy(tgtSubmit, 'Creating…', () => api.createIscsiTarget(spec));
      toast(`Target ${name} created`);
      tgtName.value = '';
      chapSecret.value = '';
      await refresh();
    } catch (e) {
      tgtErr.show(e);
    }
  });

  const volumesEl = h('div');
  const targetsEl = h('div');
  const serviceNote = h('div', { class: 'empty', 'data-test': 'iscsi-off', hidden: true });
  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-iscsi' },
    pageHead('iSCSI', 'Block volumes served to VM hosts and databases over iSCSI'),
    serviceNote,
    panel('Create a volume', [volForm, volErr.el]),
    panel('Volumes', volumesEl),
    panel('Create a target', [tgtForm, tgtErr.el]),
    panel('Targets', targetsEl),
  );

  async function refresh(): Promise<void> {
    let targets: api.IscsiTarget[] = [];
    try {
      targets = await api.iscsiTargets();
      serviceNote.hidden = true;
    } catch (e) {
      // 409: the daemon serves no iSCSI; volumes can still be made.
      serviceNote.hidden = false;
      serviceNote.textContent = e instanceof Error ? e.message : String(e);
    }
    const exportedBy = new Map<string, string>();
    for (const t of targets) for (const l of t.luns) exportedBy.set(l.volume, t.name);
    await loadInto(volumesEl, async () => {
      const vols = await api.volumes();
      const picked = new Set(Array.from(tgtLuns.selectedOptions).map((o) => o.value));
      tgtLuns.replaceChildren(
        ...vols
          .filter((v) => !exportedBy.has(v.name))
          .map((v) => h('option', { value: v.name, selected: picked.has(v.name) }, v.name)),
      );
      return table(
        [
          { title: 'Volume', cell: (v) => h('b', null, v.name) },
          // Sizes as the properties give them (32M, 16K).
          { title: 'Size', cell: (v) => propOf(v, 'volsize') },
          { title: 'Block', cell: (v) => propOf(v, 'volblocksize') },
          { title: 'Used', cell: (v) => fmtBytes(Number(propOf(v, 'used'))) },
          {
            title: 'Space',
            cell: (v) => (['', 'none', '0'].includes(propOf(v, 'refreservation')) ? h('span', { class: 'badge warn' }, 'sparse') : 'thick'),
          },
          {
            title: 'Served by',
            cell: (v) => {
              const t = exportedBy.get(v.name);
              return t ? h('code', { 'data-test': 'volume-target' }, t) : h('span', { class: 'dim' }, 'no target');
            },
          },
          {
            title: '',
            class: 'actions',
            cell: (v) => h('button', { class: 'small danger-text', 'data-test': 'volume-destroy', onclick: () => destroyVolume(v.name) }, 'Destroy'),
          },
        ],
        vols,
        'No volumes.',
        (v) => ({ 'data-test': 'volume-row', 'data-name': v.name }),
      );
    });
    await loadInto(targetsEl, async () =>
      table(
        [
          { title: 'Target', cell: (t) => h('b', null, t.name) },
          {
            title: 'LUNs',
            cell: (t) =>
              t.luns.map((l) =>
                h(
                  'div',
                  { 'data-test': 'target-lun', 'data-lun': String(l.lun) },
                  `${l.lun}: `,
                  h('code', null, l.volume),
                  ` ${fmtBytes(l.size_bytes)} `,
                  l.online ? h('span', { class: 'dim', title: 'NAA identifier' }, l.naa) : h('span', { class: 'badge bad' }, 'offline'),
                ),
              ),
          },
          { title: 'Initiators', cell: (t) => (t.allow.length ? t.allow.map((a) => h('div', null, h('code', null, a))) : h('span', { class: 'dim' }, 'any')) },
          { title: 'CHAP', cell: (t) => (t.chap_user ? `${t.chap_user}${t.mutual_chap_user ? ' (mutual)' : ''}` : h('span', { class: 'dim' }, 'none')) },
          {
            title: 'Sessions',
            cell: (t) => (t.sessions.length ? t.sessions.map((s) => h('div', { 'data-test': 'target-session' }, h('code', null, s))) : h('span', { class: 'dim' }, 'none')),
          },
          { title: 'Portals', cell: (t) => t.portals.map((p) => h('div', { 'data-test': 'target-portal' }, h('code', null, p))) },
          {
            title: '',
            class: 'actions',
            cell: (t) => h('button', { class: 'small danger-text', 'data-test': 'target-destroy', onclick: () => destroyTarget(t.name) }, 'Destroy'),
          },
        ],
        targets,
        'No targets.',
        (t) => ({ 'data-test': 'target-row', 'data-name': t.name }),
      ),
    );
  }

  function destroyVolume(name: string): void {
    confirmAction('Destroy volume', ['Destroy ', h('b', null, name), ' and every block on it?'], 'Destroy', async () => {
      await api.destroyVolume(name);
      toast(`Volume ${name} destroyed`);
      await refresh();
    });
  }

  function destroyTarget(name: string): void {
    confirmAction('Destroy target', ['Destroy ', h('b', null, name), '? Its initiators lose their disks; the volumes stay.'], 'Destroy', async () => {
      await api.destroyIscsiTarget(name);
      toast(`Target ${name} destroyed`);
      await refresh();
    });
  }

  void refresh();
  // Sessions come and go: the lists follow them.
  const stop = every(5000, refresh);
  return { el, dispose: stop };
}
