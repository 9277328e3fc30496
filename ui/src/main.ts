// The application shell: the masthead with navigation, the login gate, and the
// router that swaps pages in the content area (and disposes the one it leaves).

import * as api from './api';
import { h, replace } from './dom';
import { showLogin } from './login';
import type { Page, PageFactory } from './page';
import { analyticsPage } from './analytics/worksheet';
import { alertsPage } from './pages/alerts';
import { filesystemsPage } from './pages/filesystems';
import { iscsiPage } from './pages/iscsi';
import { poolsPage } from './pages/pools';
import { replicationPage } from './pages/replication';
import { sharesPage } from './pages/shares';
import { snapshotsPage } from './pages/snapshots';
import { statusPage } from './pages/status';
import { currentRoute, href, startRouter, type Route } from './router';
import { closeDialogs } from './widgets';

const PAGES: { name: string; title: string; page: PageFactory }[] = [
  { name: 'status', title: 'Status', page: statusPage },
  { name: 'pools', title: 'Pools', page: poolsPage },
  { name: 'filesystems', title: 'Filesystems', page: filesystemsPage },
  { name: 'shares', title: 'Shares', page: sharesPage },
  { name: 'iscsi', title: 'iSCSI', page: iscsiPage },
  { name: 'snapshots', title: 'Snapshots', page: snapshotsPage },
  { name: 'replication', title: 'Replication', page: replicationPage },
  { name: 'analytics', title: 'Analytics', page: analyticsPage },
  { name: 'alerts', title: 'Alerts', page: alertsPage },
];

let current: Page | null = null;
let session: api.Session = { login_required: false, authenticated: true };
let loggingIn: Promise<void> | null = null;

const root = document.getElementById('app') ?? document.body;
const content = h('main', { class: 'content', id: 'content' });
const navLinks = PAGES.map((p) =>
  h('a', { href: href(p.name), class: 'nav-link', 'data-test': `nav-${p.name}`, 'data-page': p.name }, p.title),
);
const hostInfo = h('span', { class: 'host-info', 'data-test': 'host-info' });
const logoutButton = h('button', { class: 'link-button', 'data-test': 'logout', hidden: true }, 'Log out');
// Warnings and critical alerts nobody acknowledged yet, on every page.
const alertBanner = h('a', { class: 'alert-banner', href: href('alerts'), 'data-test': 'alert-banner', hidden: true });

async function refreshAlerts(): Promise<void> {
  try {
    const list = await api.alerts();
    const open = list.alerts.filter((a) => !a.acknowledged && a.severity !== 'info');
    alertBanner.hidden = open.length === 0;
    alertBanner.classList.toggle('critical', open.some((a) => a.severity === 'critical'));
    alertBanner.dataset.count = String(open.length);
    const newest = open[0];
    alertBanner.textContent = newest
      ? `${open.length} alert${open.length === 1 ? '' : 's'}: ${newest.message}`
      : '';
  } catch {
    // Logged out or the daemon is away: the page says so already.
  }
}

function masthead(): HTMLElement {
  return h(
    'header',
    { class: 'masthead' },
    h('a', { class: 'brand', href: href('status') }, h('span', { class: 'logo-mark' }), 'shoal'),
    h('nav', { class: 'nav' }, navLinks),
    h('div', { class: 'mast-right' }, alertBanner, hostInfo, logoutButton),
  );
}

function render(route: Route): void {
  const [name = 'status', ...rest] = route;
  const entry = PAGES.find((p) => p.name === name) ?? PAGES[0];
  for (const a of navLinks) a.classList.toggle('active', a.dataset.page === entry.name);
  current?.dispose?.();
  current = null;
  closeDialogs();
  try {
    current = entry.page(rest);
    replace(content, current.el);
  } catch (e) {
    replace(content, h('div', { class: 'error-line' }, (e as Error).message));
  }
  document.title = `shoal · ${entry.title}`;
}

/** Every 401 lands here: the current page goes, the login form comes, then the page again. */
async function loginAgain(reason: string): Promise<void> {
  if (loggingIn) return loggingIn;
  current?.dispose?.();
  current = null;
  closeDialogs();
  replace(content);
  loggingIn = showLogin(root, reason).then(() => {
    loggingIn = null;
    render(currentRoute());
  });
  return loggingIn;
}

async function boot(): Promise<void> {
  replace(root, masthead(), content);
  api.onUnauthorized(() => void loginAgain('Your session has ended. Log in again.'));
  logoutButton.addEventListener('click', async () => {
    try {
      await api.logout();
    } finally {
      void loginAgain('Logged out.');
    }
  });
  try {
    session = await api.session();
  } catch (e) {
    replace(content, h('div', { class: 'error-line' }, `The daemon does not answer: ${(e as Error).message}`));
    return;
  }
  logoutButton.hidden = !session.login_required;
  if (session.login_required && !session.authenticated) await showLogin(root);
  api
    .status()
    .then((s) => {
      hostInfo.textContent = `shoal ${s.version} · ${s.api}`;
    })
    .catch(() => undefined);
  startRouter(render);
  void refreshAlerts();
  setInterval(() => {
    if (!loggingIn && !document.hidden) void refreshAlerts();
  }, 5000);
  window.addEventListener('shoal-alerts-changed', () => void refreshAlerts());
}

void boot();
