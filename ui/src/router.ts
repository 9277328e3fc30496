// Hash routing: "#/analytics/io-latency" is the route ["analytics", "io-latency"].
// The daemon serves one page, so every view lives behind the hash.

export type Route = string[];

export function currentRoute(): Route {
  const hash = location.hash.replace(/^#\/?/, '');
  return hash
    .split('/')
    .filter((s) => s !== '')
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    });
}

export function href(...parts: string[]): string {
  return `#/${parts.map(encodeURIComponent).join('/')}`;
}

export function navigate(...parts: string[]): void {
  const target = href(...parts);
  if (location.hash === target) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = target;
}

/** Calls `render` now and on every hash change. */
export function startRouter(render: (route: Route) => void): void {
  window.addEventListener('hashchange', () => render(currentRoute()));
  render(currentRoute());
}
