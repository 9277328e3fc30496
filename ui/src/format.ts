// Number, size, duration and time formatting with units, shared by every page:
// bytes in KB/MB/GB (powers of 1024, as the pool reports them), latencies in
// µs/ms/s, counts with K/M suffixes, and the per-statistic value formatters.

const BYTE_UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB', 'EB'];

/** Three significant digits, no exponent: 0.123, 1.23, 12.3, 123. */
export function sig3(v: number): string {
  if (!Number.isFinite(v)) return '-';
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return trimZeros(v.toFixed(1));
  if (a >= 1) return trimZeros(v.toFixed(2));
  if (a >= 0.01) return trimZeros(v.toFixed(3));
  return v.toPrecision(2);
}

function trimZeros(s: string): string {
  return s.includes('.') ? s.replace(/\.?0+$/, '') : s;
}

export function fmtBytes(n: number): string {
  if (!Number.isFinite(n)) return '-';
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? Math.round(v) : sig3(v)} ${BYTE_UNITS[i]}`;
}

/** Counts: 950, 1.2K, 3.4M, 5.6G. */
export function fmtCount(n: number): string {
  if (!Number.isFinite(n)) return '-';
  const a = Math.abs(n);
  if (a >= 1e9) return `${sig3(n / 1e9)}G`;
  if (a >= 1e6) return `${sig3(n / 1e6)}M`;
  if (a >= 1e4) return `${sig3(n / 1e3)}K`;
  if (Number.isInteger(n)) return String(n);
  return sig3(n);
}

/** An integer with thousands separators: 1 234 567. */
export function fmtInt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Microseconds as µs, ms or s. */
export function fmtMicros(us: number): string {
  if (!Number.isFinite(us)) return '-';
  const a = Math.abs(us);
  if (a >= 1e6) return `${sig3(us / 1e6)} s`;
  if (a >= 1e3) return `${sig3(us / 1e3)} ms`;
  return `${sig3(us)} µs`;
}

/** A length of time in seconds: 45 s, 10 min, 2 h 5 min, 3 d 4 h. */
export function fmtDuration(s: number): string {
  s = Math.round(s);
  if (s < 60) return `${s} s`;
  if (s < 3600) {
    const m = Math.floor(s / 60);
    const r = s % 60;
    return r ? `${m} min ${r} s` : `${m} min`;
  }
  if (s < 86400) {
    const hr = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    return m ? `${hr} h ${m} min` : `${hr} h`;
  }
  const d = Math.floor(s / 86400);
  const hr = Math.floor((s % 86400) / 3600);
  return hr ? `${d} d ${hr} h` : `${d} d`;
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** Unix seconds as local HH:MM:SS. */
export function fmtClock(t: number): string {
  const d = new Date(t * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

/** Unix seconds as local YYYY-MM-DD HH:MM:SS. */
export function fmtDateTime(t: number): string {
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${fmtClock(t)}`;
}

/** Percent with one decimal. */
export function fmtPercent(part: number, whole: number): string {
  if (!whole) return '-';
  return `${((100 * part) / whole).toFixed(1)} %`;
}

/** How a value in a statistic's unit is written. */
export interface UnitFormat {
  /** A value with its unit: "12.3 MB/s". */
  value(v: number): string;
  /** A compact axis tick: "12.3M". */
  tick(v: number): string;
  /** The unit alone, for axis titles and table headers: "bytes/s". */
  label: string;
}

/**
 * The formatter for a statistic's unit. `perSecond` is true for rates (counted
 * events), false for gauges (levels sampled each second).
 */
export function unitFormat(unit: string, perSecond: boolean): UnitFormat {
  const ps = perSecond ? '/s' : '';
  switch (unit) {
    case 'bytes':
      return {
        value: (v) => `${fmtBytes(v)}${ps}`,
        tick: (v) => fmtBytes(v).replace(' ', ''),
        label: `bytes${ps}`,
      };
    case 'operations':
    case 'ops':
      return {
        value: (v) => `${fmtCount(v)} ops${ps}`,
        tick: fmtCount,
        label: `ops${ps}`,
      };
    case 'microseconds':
      return { value: fmtMicros, tick: (v) => fmtMicros(v).replace(' ', ''), label: 'time' };
    case 'percent':
      return { value: (v) => `${sig3(v)} %${ps}`, tick: (v) => `${sig3(v)}%`, label: `%${ps}` };
    default:
      return {
        value: (v) => `${fmtCount(v)} ${unit}${ps}`,
        tick: fmtCount,
        label: `${unit}${ps}`,
      };
  }
}

/** Bucket bounds of a numeric breakdown, by the breakdown's unit. */
export function fmtBound(v: number, unit: string | null): string {
  if (unit === 'microseconds') return fmtMicros(v);
  if (unit === 'bytes') return fmtBytes(v);
  return fmtCount(v);
}
