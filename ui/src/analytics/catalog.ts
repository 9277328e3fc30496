// The statistics catalog from GET /analytics/statistics, normalised: every
// statistic gets a kind (rate or gauge, rate when the daemon does not say) and a
// divisor (1 when absent), and knows how its values are written. Nothing here
// names a statistic: the UI shows whatever the daemon measures.

import * as api from '../api';
import { unitFormat, type UnitFormat } from '../format';

export interface StatInfo {
  name: string;
  description: string;
  unit: string;
  kind: 'rate' | 'gauge';
  divisor: number;
  dimensions: api.Dimension[];
  format: UnitFormat;
}

export class Catalog {
  private readonly byName = new Map<string, StatInfo>();

  constructor(stats: api.Statistic[]) {
    for (const s of stats) {
      const kind = s.kind === 'gauge' ? 'gauge' : 'rate';
      const divisor = typeof s.divisor === 'number' && s.divisor > 0 ? s.divisor : 1;
      this.byName.set(s.name, {
        name: s.name,
        description: s.description,
        unit: s.unit,
        kind,
        divisor,
        dimensions: s.dimensions ?? [],
        format: unitFormat(s.unit, kind === 'rate'),
      });
    }
  }

  list(): StatInfo[] {
    return [...this.byName.values()];
  }

  /** A statistic, or a stand-in for one this daemon no longer lists. */
  get(name: string): StatInfo {
    return (
      this.byName.get(name) ?? {
        name,
        description: name,
        unit: '',
        kind: 'rate',
        divisor: 1,
        dimensions: [],
        format: unitFormat('', true),
      }
    );
  }

  dimension(stat: string, dim: string): api.Dimension | undefined {
    return this.get(stat).dimensions.find((d) => d.name === dim);
  }
}

let loading: Promise<Catalog> | null = null;

/** The catalog, fetched once per page load (again after a failure). */
export function loadCatalog(): Promise<Catalog> {
  if (!loading) {
    loading = api.statistics().then(
      (s) => new Catalog(s),
      (e) => {
        loading = null;
        throw e;
      },
    );
  }
  return loading;
}
