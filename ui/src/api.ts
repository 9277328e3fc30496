// The admin API client: one typed function per operation of docs/openapi.json,
// JSON in and out, errors as ApiError carrying the daemon's `error` message, and
// a hook that fires when the daemon answers 401 (the login form takes over).

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

// --- shapes (see docs/openapi.json) -------------------------------------------

export interface Session {
  login_required: boolean;
  authenticated: boolean;
}

export interface Share {
  dataset: string;
  path: string;
  rules: string;
  read_only_dataset: boolean;
}

export interface FilesystemSummary {
  name: string;
  used_bytes: number;
  available_bytes: number;
  sync: string;
  compression?: string;
  recordsize?: string;
  shared?: boolean;
}

export interface PoolSummary {
  name: string;
  health: string;
  capacity_bytes: number;
  allocated_bytes: number;
  filesystems: FilesystemSummary[];
}

export interface Status {
  version: string;
  pid: number;
  started_unix: number;
  nfs: string[];
  api: string;
  pools: PoolSummary[];
  shares: Share[];
}

export interface Device {
  path: string;
  /** Kept as written: 64-bit. */
  guid: string;
  health: string;
  io_mode: string;
  read_errors: number;
  write_errors: number;
  cksum_errors: number;
  read_ops: number;
  write_ops: number;
  read_bytes: number;
  write_bytes: number;
  repaired_bytes: number;
}

export interface TopVdev {
  id: number;
  layout: string;
  health: string;
  capacity_bytes: number;
  free_bytes: number;
  children: Device[];
}

export interface ScrubSummary {
  blocks: number;
  bytes: number;
  repaired_bytes: number;
  bad_copies: number;
  errors: number;
  seconds: number;
  finished_at_txg: number;
}

export interface PoolStatus {
  name: string;
  /** Kept as written: 64-bit. */
  guid: string;
  health: string;
  txg: number;
  capacity_bytes: number;
  allocated_bytes: number;
  free_bytes: number;
  vdevs: TopVdev[];
  log: Device[];
  cache: Device[];
  spares?: Device[];
  arc: Record<string, number>;
  l2arc: Record<string, number> | null;
  suspended: string | null;
  last_scrub: ScrubSummary | null;
  unrecoverable_reads: number;
  intent_log: Record<string, number | string>;
}

export interface Property {
  property: string;
  value: string;
  source: string;
}

export interface Filesystem {
  name: string;
  objset: number;
  props: Property[];
}

export interface Snapshot {
  id: number;
  name: string;
  dataset: number;
  txg: number;
  unique_bytes: number;
  /** Tags of its holds: a held snapshot cannot be destroyed. */
  holds: string[];
}

export interface ScheduleRun {
  at_unix: number;
  ok: boolean;
  taken: string[];
  pruned: string[];
  error?: string;
}

export interface ScheduleStatus {
  id: number;
  dataset: string;
  every: string;
  keep: number;
  recursive: boolean;
  next_run_unix: number;
  last_run: ScheduleRun | null;
}

export interface NewSchedule {
  dataset: string;
  every: string;
  keep: number;
  recursive: boolean;
}

export interface Hold {
  snapshot: string;
  tag: string;
  created_unix: number;
}

export interface Export {
  path: string;
  rules: string;
  mounts: string[];
}

export interface Dimension {
  name: string;
  kind: 'categorical' | 'numeric';
  unit: string | null;
}

export interface Statistic {
  name: string;
  description: string;
  unit: string;
  /** "rate" (counted events, shown per second) or "gauge" (a sampled level). */
  kind?: 'rate' | 'gauge';
  /** The shown value is total / seconds / divisor. */
  divisor?: number;
  dimensions: Dimension[];
}

export interface DatasetInfo {
  name: string;
  statistic: string;
  description: string;
  unit: string;
  breakdown: string | null;
  breakdown_unit: string | null;
  filters: [string, string][];
  builtin: boolean;
  since: number;
  /** A level read each second (averaged over time, never summed), not a count of events. */
  gauge?: boolean;
  /** The shown value is total / seconds / divisor. */
  divisor?: number;
}

export interface KeyCount {
  key: string;
  count: number;
}

export interface Bucket {
  low: number;
  high: number;
  count: number;
}

export interface Point {
  t: number;
  seconds: number;
  total: number;
  breakdown?: KeyCount[];
  buckets?: Bucket[];
}

export type Resolution = 'second' | 'minute' | 'hour';

export interface Summary {
  seconds: number;
  total: number;
  average: number;
  min: number;
  max: number;
}

export interface Series extends DatasetInfo {
  resolution: Resolution;
  start: number;
  end: number;
  points: Point[];
  summary: Summary;
}

export interface AnalyticsStatus {
  events_dropped: number;
  events_late: number;
  sealed_upto: number | null;
  datasets: number;
}

export interface Worksheet {
  name: string;
  datasets: string[];
}

// --- transport ------------------------------------------------------------------

let unauthorized: (() => void) | null = null;

/** Called whenever an API call answers 401 (not for the login call itself). */
export function onUnauthorized(fn: () => void): void {
  unauthorized = fn;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
  const init: RequestInit = { method, headers, credentials: 'same-origin' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res: Response;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `cannot reach the daemon (${(e as Error).message})`);
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: unknown = undefined;
  if (text) {
    try {
      json = JSON.parse(quoteGuids(text));
    } catch {
      json = undefined;
    }
  }
  if (!res.ok) {
    const msg =
      json && typeof json === 'object' && typeof (json as { error?: unknown }).error === 'string'
        ? (json as { error: string }).error
        : `${res.status} ${res.statusText || 'error'}`;
    if (res.status === 401 && path !== '/api/v1/login' && unauthorized) unauthorized();
    throw new ApiError(res.status, msg);
  }
  return json as T;
}

/**
 * GUIDs are 64-bit and the daemon writes them as JSON numbers, which lose their
 * low digits as JavaScript numbers: keep them as the strings they were written as.
 */
function quoteGuids(text: string): string {
  return text.replace(/"guid":(\d+)/g, '"guid":"$1"');
}

/** A dataset path parameter: each segment escaped, slashes (and @) kept as the API wants. */
function pathOf(name: string): string {
  return name
    .split('/')
    .map((s) => encodeURIComponent(s).replace(/%40/g, '@'))
    .join('/');
}

function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  return q.toString();
}

const V1 = '/api/v1';

// --- session --------------------------------------------------------------------

export async function session(): Promise<Session> {
  try {
    return await call<Session>('GET', `${V1}/session`);
  } catch (e) {
    // A daemon without login support has no session endpoint: nothing to log in to.
    if (e instanceof ApiError && e.status === 404) return { login_required: false, authenticated: true };
    throw e;
  }
}

export const login = (password: string) => call<{ token: string }>('POST', `${V1}/login`, { password });
export const logout = () => call<void>('POST', `${V1}/logout`);

// --- configuration --------------------------------------------------------------

export const status = () => call<Status>('GET', `${V1}/status`);
export const pools = () => call<PoolStatus[]>('GET', `${V1}/pools`);
export const scrub = (pool: string) => call<ScrubSummary>('POST', `${V1}/pools/${pathOf(pool)}/scrub`);

export const filesystems = () => call<Filesystem[]>('GET', `${V1}/filesystems`);
export const createFilesystem = (name: string, properties: Record<string, string>) =>
  call<Filesystem>('POST', `${V1}/filesystems`, { name, properties });
export const setProperties = (name: string, properties: Record<string, string | null>) =>
  call<Filesystem>('PATCH', `${V1}/filesystems/${pathOf(name)}`, { properties });
export const destroyFilesystem = (name: string) => call<void>('DELETE', `${V1}/filesystems/${pathOf(name)}`);

export const snapshots = () => call<Snapshot[]>('GET', `${V1}/snapshots`);
export const createSnapshot = (name: string) => call<Snapshot>('POST', `${V1}/snapshots`, { name });
export const destroySnapshot = (name: string) => call<void>('DELETE', `${V1}/snapshots/${pathOf(name)}`);
export const rollback = (name: string, destroyNewer = false) =>
  call<void>('POST', `${V1}/rollback`, { name, destroy_newer: destroyNewer });
export const schedules = () => call<ScheduleStatus[]>('GET', `${V1}/schedules`);
export const addSchedule = (s: NewSchedule) => call<ScheduleStatus>('POST', `${V1}/schedules`, s);
export const removeSchedule = (id: number) => call<void>('DELETE', `${V1}/schedules/${id}`);
export const runSchedule = (id: number) => call<ScheduleRun>('POST', `${V1}/schedules/${id}/run`);
export const holds = (of?: string) => call<Hold[]>('GET', `${V1}/holds${of ? `?of=${encodeURIComponent(of)}` : ''}`);
export const hold = (snapshot: string, tag: string) => call<Hold>('POST', `${V1}/holds`, { snapshot, tag });
export const release = (snapshot: string, tag: string) =>
  call<void>('DELETE', `${V1}/holds?snapshot=${encodeURIComponent(snapshot)}&tag=${encodeURIComponent(tag)}`);

export const volumes = () => call<Filesystem[]>('GET', `${V1}/volumes`);
export const createVolume = (name: string, volsize: string, sparse: boolean) =>
  call<Filesystem>('POST', `${V1}/volumes`, { name, volsize, sparse });
export const destroyVolume = (name: string) => call<void>('DELETE', `${V1}/volumes/${pathOf(name)}`);

export interface IscsiLun {
  lun: number;
  volume: string;
  online: boolean;
  size_bytes: number;
  block_size: number;
  naa: string;
}

export interface IscsiTarget {
  name: string;
  alias: string | null;
  luns: IscsiLun[];
  allow: string[];
  chap_user: string | null;
  mutual_chap_user: string | null;
  sessions: string[];
  portals: string[];
}

export interface NewIscsiTarget {
  name: string;
  luns: Record<string, string>;
  allow: string[];
  chap?: { user: string; secret: string };
  mutual_chap?: { user: string; secret: string };
}

export const iscsiTargets = () => call<IscsiTarget[]>('GET', `${V1}/iscsi/targets`);
export const createIscsiTarget = (t: NewIscsiTarget) => call<IscsiTarget>('POST', `${V1}/iscsi/targets`, t);
export const destroyIscsiTarget = (name: string) =>
  call<void>('DELETE', `${V1}/iscsi/targets/${encodeURIComponent(name)}`);

export const shares = () => call<Share[]>('GET', `${V1}/shares`);
export const putShare = (dataset: string, rules: string) =>
  call<Share>('PUT', `${V1}/shares/${pathOf(dataset)}`, { rules });
export const deleteShare = (dataset: string) => call<void>('DELETE', `${V1}/shares/${pathOf(dataset)}`);
export const exports = () => call<Export[]>('GET', `${V1}/exports`);

// --- alerts -----------------------------------------------------------------------

export type Severity = 'info' | 'warning' | 'critical';

export interface Alert {
  id: number;
  time_unix: number;
  severity: Severity;
  kind: string;
  object: string;
  message: string;
  acknowledged: boolean;
}

export interface AlertList {
  unacknowledged: number;
  alerts: Alert[];
}

export const alerts = () => call<AlertList>('GET', `${V1}/alerts`);
export const acknowledge = (id?: number) =>
  call<{ acknowledged: number }>('POST', `${V1}/alerts/acknowledge`, id === undefined ? {} : { id });

// --- replication ----------------------------------------------------------------

export interface TargetInfo {
  name: string;
  address: string;
  tls: boolean;
}

export interface ReplicationAction {
  id: number;
  filesystem: string;
  target: string;
  remote: string;
  interval_seconds: number;
  continuous: boolean;
  /** Runs after each snapshot a snapshot schedule takes of the filesystem. */
  follow_schedules: boolean;
  keep_local: number;
  keep_remote: number;
  bandwidth: number;
  alert_lag_seconds?: number;
}

export interface ReplicationRun {
  started_unix: number;
  finished_unix: number;
  snapshot: string;
  base: string | null;
  bytes: number;
  streams: number;
  ok: boolean;
  error: string | null;
}

export interface ReplicationActionStatus extends ReplicationAction {
  running: { started_unix: number; snapshot: string; bytes: number; rate: number } | null;
  lag_seconds: number | null;
  history: ReplicationRun[];
}

export interface Replica {
  credential: string | null;
  last_snapshot: string | null;
  last_received_unix: number | null;
}

export interface ReplicationOverview {
  targets: TargetInfo[];
  actions: ReplicationActionStatus[];
  credentials: { name: string; created_unix: number }[];
  incoming: Record<string, Replica>;
}

export interface NewReplicationAction {
  filesystem: string;
  target: string;
  remote?: string;
  interval_seconds?: number;
  continuous?: boolean;
  follow_schedules?: boolean;
  keep_local?: number;
  keep_remote?: number;
  bandwidth?: number;
  alert_lag_seconds?: number;
}

export const replication = () => call<ReplicationOverview>('GET', `${V1}/replication`);
export const createCredential = (name: string) =>
  call<{ name: string; token: string }>('POST', `${V1}/replication/credentials`, { name });
export const deleteCredential = (name: string) =>
  call<void>('DELETE', `${V1}/replication/credentials/${encodeURIComponent(name)}`);
export const addTarget = (t: { name: string; address: string; credential: string; certificate?: string }) =>
  call<TargetInfo>('POST', `${V1}/replication/targets`, t);
export const deleteTarget = (name: string) => call<void>('DELETE', `${V1}/replication/targets/${encodeURIComponent(name)}`);
export const addAction = (a: NewReplicationAction) => call<ReplicationAction>('POST', `${V1}/replication/actions`, a);
export const deleteAction = (id: number) => call<void>('DELETE', `${V1}/replication/actions/${id}`);
export const runAction = (id: number) => call<ReplicationRun>('POST', `${V1}/replication/actions/${id}/run`);
export const promote = (fs: string) => call<ReplicationOverview>('POST', `${V1}/replication/promote/${pathOf(fs)}`);
export const demote = (fs: string) => call<ReplicationOverview>('POST', `${V1}/replication/demote/${pathOf(fs)}`);

// --- analytics ------------------------------------------------------------------

export const statistics = () => call<Statistic[]>('GET', `${V1}/analytics/statistics`);
export const datasets = () => call<DatasetInfo[]>('GET', `${V1}/analytics/datasets`);
export const enableDataset = (name: string) => call<DatasetInfo>('POST', `${V1}/analytics/datasets`, { name });
export const disableDataset = (name: string) =>
  call<void>('DELETE', `${V1}/analytics/datasets?${query({ name })}`);
export const analyticsStatus = () => call<AnalyticsStatus>('GET', `${V1}/analytics/status`);

export interface DataQuery {
  name: string;
  start?: number;
  end?: number;
  seconds?: number;
  resolution?: Resolution;
}

export const data = (q: DataQuery) => call<Series>('GET', `${V1}/analytics/data?${query({ ...q })}`);

export async function worksheets(): Promise<Worksheet[]> {
  try {
    return await call<Worksheet[]>('GET', `${V1}/analytics/worksheets`);
  } catch (e) {
    // A daemon that cannot keep worksheets has none saved.
    if (e instanceof ApiError && e.status === 404) return [];
    throw e;
  }
}

export const saveWorksheet = (name: string, datasets: string[]) =>
  call<Worksheet>('PUT', `${V1}/analytics/worksheets/${encodeURIComponent(name)}`, { datasets });
export const deleteWorksheet = (name: string) =>
  call<void>('DELETE', `${V1}/analytics/worksheets/${encodeURIComponent(name)}`);

// --- pool administration -------------------------------------------------------------

export interface Operation {
  pool: string;
  kind: 'scrub' | 'resilver';
  device: string | null;
  started_unix: number;
  bytes_done: number;
  bytes_total: number;
  rate: number;
  seconds_left: number | null;
}

export interface Candidate {
  path: string;
  size_bytes: number;
  kind: 'file' | 'block';
  pool: string | null;
  pool_state: 'active' | 'exported' | 'destroyed' | null;
  in_use: boolean;
}

export interface Prediction {
  disks: number;
  read_disks: number;
  write_disks: number;
  streaming_read_mb_per_s: number;
  streaming_write_mb_per_s: number;
  random_read_iops: number;
  usable_bytes: number | null;
}

export interface ResilverSummary {
  blocks: number;
  bytes_written: number;
  errors: number;
  seconds: number;
}

export const operations = () => call<Operation[]>('GET', `${V1}/operations`);
export const candidates = () => call<Candidate[]>('GET', `${V1}/devices`);
export const plan = (layout: string, diskMbps: number, diskIops: number, diskSize?: number) =>
  call<Prediction>(
    'GET',
    `${V1}/plan?${query({ layout, disk_mbps: String(diskMbps), disk_iops: String(diskIops), ...(diskSize ? { disk_size: String(diskSize) } : {}) })}`,
  );
export const createPool = (name: string, layout: string[]) => call<PoolStatus>('POST', `${V1}/pools`, { name, layout });
export const importPool = (dir: string, name: string) => call<PoolStatus>('POST', `${V1}/pools/import`, { dir, name });
export const exportPool = (name: string) =>
  call<void>('POST', `${V1}/pools/${pathOf(name)}/export?confirm=${encodeURIComponent(name)}`);
export const destroyPool = (name: string) =>
  call<void>('DELETE', `${V1}/pools/${pathOf(name)}?confirm=${encodeURIComponent(name)}`);
export const replaceDevice = (pool: string, old: string, device: string) =>
  call<ResilverSummary>('POST', `${V1}/pools/${pathOf(pool)}/replace`, { old, new: device });
export const clearDevice = (pool: string, device: string) =>
  call<ResilverSummary>('POST', `${V1}/pools/${pathOf(pool)}/clear`, { device });
export const addDevices = (pool: string, layout: string[]) =>
  call<PoolStatus>('POST', `${V1}/pools/${pathOf(pool)}/add`, { layout });
export const removeDevice = (pool: string, device: string) =>
  call<PoolStatus>('POST', `${V1}/pools/${pathOf(pool)}/remove`, { device });
export const attachDevice = (pool: string, device: string, added: string) =>
  call<ResilverSummary>('POST', `${V1}/pools/${pathOf(pool)}/attach`, { device, new: added });
export const detachDevice = (pool: string, device: string) =>
  call<PoolStatus>('POST', `${V1}/pools/${pathOf(pool)}/detach`, { device });
export const offlineDevice = (pool: string, device: string) =>
  call<PoolStatus>('POST', `${V1}/pools/${pathOf(pool)}/offline`, { device });
export const onlineDevice = (pool: string, device: string) =>
  call<ResilverSummary>('POST', `${V1}/pools/${pathOf(pool)}/online`, { device });
