// The Alerts page: everything the daemon alerted about (faults, degraded pools,
// checksum errors, fullness, scrubs, replication), newest first, and acknowledging
// them, which clears the masthead's banner.

import * as api from '../api';
import { h } from '../dom';
import { fmtDateTime } from '../format';
import { every, type Page } from '../page';
import { busy, errorLine, loadInto, pageHead, panel, table, toast } from '../widgets';

function changed(): void {
  window.dispatchEvent(new Event('shoal-alerts-changed'));
}

export function alertsPage(): Page {
  const listEl = h('div');
  const err = errorLine('alerts-error');
  const ackAll = h('button', { class: 'small', 'data-test': 'alerts-ack-all' }, 'Acknowledge all');
  ackAll.addEventListener('click', async () => {
    err.clear();
    try {
      const r = await busy(ackAll, 'Acknowledging…', () => api.acknowledge());
      toast(`${r.acknowledged} acknowledged`);
      changed();
      await refresh();
    } catch (e) {
      err.show(e);
    }
  });
  const el = h(
    'div',
    { class: 'page', 'data-test': 'page-alerts' },
    pageHead('Alerts', 'Faults, degraded pools, checksum errors, fullness, scrubs and replication, newest first'),
    panel('Alerts', [err.el, listEl], ackAll),
  );

  async function refresh(): Promise<void> {
    await loadInto(listEl, async () => {
      const list = await api.alerts();
      return table(
        [
          { title: 'When', cell: (a) => fmtDateTime(a.time_unix) },
          { title: 'Severity', cell: (a) => h('span', { class: `severity-${a.severity}` }, a.severity) },
          { title: 'What', cell: (a) => a.kind },
          { title: 'Concerns', cell: (a) => a.object },
          { title: 'Message', cell: (a) => a.message },
          {
            title: '',
            class: 'actions',
            cell: (a) => {
              if (a.acknowledged) return h('span', { class: 'dim' }, 'acknowledged');
              const b = h('button', { class: 'small', 'data-test': 'alert-ack' }, 'Acknowledge');
              b.addEventListener('click', async () => {
                try {
                  await busy(b, '…', () => api.acknowledge(a.id));
                  changed();
                  await refresh();
                } catch (e) {
                  err.show(e);
                }
              });
              return b;
            },
          },
        ],
        list.alerts,
        'No alerts.',
        (a) => ({ 'data-test': 'alert-row', 'data-kind': a.kind, 'data-severity': a.severity, 'data-acknowledged': String(a.acknowledged) }),
      );
    });
  }

  void refresh();
  const stop = every(5000, refresh);
  return { el, dispose: stop };
}
