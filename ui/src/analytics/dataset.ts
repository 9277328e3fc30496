// Dataset names: a statistic, filters and at most one breakdown, written
// nfs3.ops[op=read][client=10.0.0.2][file]. Parsing, writing, drilling down
// (filter on a breakdown value, break down by another dimension) and titles.

import type { Catalog } from './catalog';

export interface Spec {
  statistic: string;
  filters: [string, string][];
  breakdown: string | null;
}

export function parseSpec(name: string): Spec {
  const i = name.indexOf('[');
  const spec: Spec = { statistic: i < 0 ? name : name.slice(0, i), filters: [], breakdown: null };
  let rest = i < 0 ? '' : name.slice(i);
  while (rest.startsWith('[')) {
    const end = rest.indexOf(']');
    if (end < 0) break;
    const part = rest.slice(1, end);
    rest = rest.slice(end + 1);
    const eq = part.indexOf('=');
    if (eq < 0) spec.breakdown = part;
    else spec.filters.push([part.slice(0, eq), part.slice(eq + 1)]);
  }
  return spec;
}

export function formatSpec(s: Spec): string {
  return s.statistic + s.filters.map(([d, v]) => `[${d}=${v}]`).join('') + (s.breakdown ? `[${s.breakdown}]` : '');
}

/** Breakdown values that stand for several values, or none, and cannot be filtered on. */
const PSEUDO_KEYS = new Set(['(other)', '(none)', '(other keys)']);

/** Why a breakdown value cannot become a filter, or null when it can. */
export function cannotFilter(key: string): string | null {
  if (PSEUDO_KEYS.has(key)) return `${key} groups several values; it cannot be filtered on`;
  if (key.includes(']')) return 'values containing "]" cannot be written in a dataset name';
  if (key === '') return 'an empty value cannot be filtered on';
  return null;
}

/** The dataset that keeps only `key` of `from`'s breakdown, broken down by `by` (or not at all). */
export function drill(from: Spec, key: string, by: string | null): Spec {
  if (!from.breakdown) throw new Error('only a broken-down dataset can be drilled into');
  return {
    statistic: from.statistic,
    filters: [...from.filters, [from.breakdown, key]],
    breakdown: by,
  };
}

/** Dimensions `s` can still be broken down by after filtering on its breakdown. */
export function drillDimensions(s: Spec, catalog: Catalog): { name: string; numeric: boolean }[] {
  const used = new Set(s.filters.map(([d]) => d));
  if (s.breakdown) used.add(s.breakdown);
  return catalog
    .get(s.statistic)
    .dimensions.filter((d) => !used.has(d.name))
    .map((d) => ({ name: d.name, numeric: d.kind === 'numeric' }));
}

/** "NFS operations by client" */
export function specTitle(s: Spec, catalog: Catalog): string {
  const stat = catalog.get(s.statistic);
  return s.breakdown ? `${stat.description} by ${s.breakdown}` : stat.description;
}
