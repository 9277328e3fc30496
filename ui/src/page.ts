// What a page is to the shell: an element to show, and cleanup (timers, charts)
// for when the user goes elsewhere.

import type { Route } from './router';

export interface Page {
  el: HTMLElement;
  dispose?(): void;
}

/** `route` is the hash route after the page's own name: ["io"] for #/analytics/io. */
export type PageFactory = (route: Route) => Page;

/** Calls `fn` every `ms` until disposed, skipping a beat while the last call runs. */
export function every(ms: number, fn: () => Promise<void> | void): () => void {
  let running = false;
  const id = setInterval(async () => {
    if (running || document.hidden) return;
    running = true;
    try {
      await fn();
    } finally {
      running = false;
    }
  }, ms);
  return () => clearInterval(id);
}
