// Dataset names: a statistic, filters and at most one breakdown, written
// nfs3.ops[op=read][client=10.0.0.2][file]. A filter on a numeric dimension
// (latency, size, offset) is a range, [latency=1000..10000] (low inclusive, high
// exclusive, either side may be empty), and may be combined with a breakdown by
// the same dimension. Parsing, writing, drilling down (filter on a breakdown
// value or a heatmap band, break down by another dimension) and titles.

import type { Catalog } from './catalog';

export interface Spec {
  statistic: string;
  /** [dimension, value]; a numeric dimension's value is a range, "LOW..HIGH". */
  filters: [string, string][];
  breakdown: string | null;
}

/** A numeric range filter: low <= value < high, null for an open side. */
export interface NumRange {
  low: number | null;
  high: number | null;
}

const RANGE_RE = /^(\d*)\.\.(\d*)$/;

/** The range a filter value names ("1000..10000", "10000..", "..4096"), or null if it is not one. */
export function parseRange(value: string): NumRange | null {
  const m = RANGE_RE.exec(value);
  if (!m) return null;
  const side = (s: string) => (s === '' ? null : Number(s));
  return { low: side(m[1]), high: side(m[2]) };
}

/** A bound as the daemon writes it: an integer, no exponent. */
function intText(v: number): string {
  return BigInt(Math.round(v)).toString();
}

/** "LOW..HIGH" with open sides left empty, as the daemon's canonical names print it. */
export function formatRange(r: NumRange): string {
  return `${r.low === null ? '' : intText(r.low)}..${r.high === null ? '' : intText(r.high)}`;
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
    if (eq < 0) {
      spec.breakdown = part;
      continue;
    }
    const value = part.slice(eq + 1);
    const range = parseRange(value);
    // Ranges are kept in the daemon's spelling (no leading zeros), so names compare equal.
    spec.filters.push([part.slice(0, eq), range ? formatRange(range) : value]);
  }
  return spec;
}

export function formatSpec(s: Spec): string {
  const filter = ([d, v]: [string, string]) => {
    const range = parseRange(v);
    return `[${d}=${range ? formatRange(range) : v}]`;
  };
  return s.statistic + s.filters.map(filter).join('') + (s.breakdown ? `[${s.breakdown}]` : '');
}

/** The range filter on `dim`, if `s` has one. */
export function rangeFilter(s: Spec, dim: string): NumRange | null {
  const f = s.filters.find(([d]) => d === dim);
  return f ? parseRange(f[1]) : null;
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

/**
 * The dataset that keeps only the events of `from` whose `dim` lies in `band`
 * (replacing any range `from` already had on it), broken down by `by`: a heatmap
 * band drilled into by another dimension, or zoomed into when `by` is `dim`.
 */
export function drillBand(from: Spec, dim: string, band: NumRange, by: string | null): Spec {
  return {
    statistic: from.statistic,
    filters: [...from.filters.filter(([d]) => d !== dim), [dim, formatRange(band)]],
    breakdown: by,
  };
}

/**
 * Dimensions `s` can still be broken down by after filtering on its breakdown:
 * not those with a value filter; a dimension filtered by a range can still be
 * broken down (the range's heatmap).
 */
export function drillDimensions(s: Spec, catalog: Catalog): { name: string; numeric: boolean }[] {
  const used = new Set(s.filters.filter(([, v]) => parseRange(v) === null).map(([d]) => d));
  if (s.breakdown) used.add(s.breakdown);
  return catalog
    .get(s.statistic)
    .dimensions.filter((d) => !used.has(d.name))
    .map((d) => ({ name: d.name, numeric: d.kind === 'numeric' }));
}

/** Dimensions a band of `s`'s heatmap (a range of its breakdown) can be broken down by, besides zooming. */
export function bandDimensions(s: Spec, catalog: Catalog): { name: string; numeric: boolean }[] {
  const used = new Set(s.filters.filter(([d, v]) => d !== s.breakdown && parseRange(v) === null).map(([d]) => d));
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
