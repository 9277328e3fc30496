// A small NFSv3 load for trying the browser test by hand (the Rust harness makes
// its own): from each given source address it mounts the export, makes sure a
// few files exist, and reads them in a loop for a bounded time. Loopback only.
//
//   node tests/nfs-load.mjs --server 127.0.0.1:2049 --export /tank/ui \
//        --from 127.0.0.1,127.0.0.2 --seconds 120 --rate 50
//
// The NFS and MOUNT programs are expected on the same port, as shoal serves them.
import { connect } from 'node:net';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const [host, port] = (args.server ?? '127.0.0.1:2049').split(':');
const exportPath = args.export ?? '/';
const sources = (args.from ?? '127.0.0.1').split(',');
const seconds = Math.min(Number(args.seconds ?? 60), 600);
const rate = Math.min(Number(args.rate ?? 50), 1000); // READs per second per client
const files = ['f1', 'f2', 'f3'];

for (const h of [host, ...sources]) {
  if (!h.startsWith('127.') && h !== 'localhost') throw new Error(`refusing to send NFS traffic to or from ${h}: loopback only`);
}

/** XDR writer. */
class W {
  parts = [];
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32BE(v >>> 0); this.parts.push(b); return this; }
  u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(v)); this.parts.push(b); return this; }
  opaque(buf) { this.u32(buf.length); this.parts.push(buf); const pad = (4 - (buf.length % 4)) % 4; if (pad) this.parts.push(Buffer.alloc(pad)); return this; }
  str(s) { return this.opaque(Buffer.from(s)); }
  buf() { return Buffer.concat(this.parts); }
}

/** XDR reader. */
class R {
  constructor(b) { this.b = b; this.o = 0; }
  u32() { const v = this.b.readUInt32BE(this.o); this.o += 4; return v; }
  opaque() { const n = this.u32(); const v = this.b.subarray(this.o, this.o + n); this.o += n + ((4 - (n % 4)) % 4); return v; }
}

/** One TCP connection speaking ONC RPC with AUTH_SYS as root, from `local`. */
class Rpc {
  constructor(local) { this.local = local; this.xid = (Math.random() * 2 ** 31) >>> 0; this.waiting = new Map(); this.acc = Buffer.alloc(0); }
  open() {
    return new Promise((resolve, reject) => {
      this.sock = connect({ host, port: Number(port), localAddress: this.local }, resolve);
      this.sock.on('error', reject);
      this.sock.on('data', (d) => this.onData(d));
    });
  }
  onData(d) {
    this.acc = Buffer.concat([this.acc, d]);
    while (this.acc.length >= 4) {
      const len = this.acc.readUInt32BE(0) & 0x7fffffff;
      if (this.acc.length < 4 + len) return;
      const rec = this.acc.subarray(4, 4 + len);
      this.acc = this.acc.subarray(4 + len);
      const r = new R(rec);
      const xid = r.u32();
      r.u32(); // REPLY
      const replyStat = r.u32();
      r.u32(); r.opaque(); // verifier
      const acceptStat = r.u32();
      const w = this.waiting.get(xid);
      this.waiting.delete(xid);
      if (!w) continue;
      if (replyStat !== 0 || acceptStat !== 0) w.reject(new Error(`rpc refused (${replyStat}/${acceptStat})`));
      else w.resolve(r);
    }
  }
  call(prog, vers, proc, body) {
    const xid = (this.xid = (this.xid + 1) >>> 0);
    const cred = new W().u32(0).str('shoal-ui-load').u32(0).u32(0).u32(0).buf();
    const msg = new W().u32(xid).u32(0).u32(2).u32(prog).u32(vers).u32(proc).u32(1).opaque(cred).u32(0).u32(0).buf();
    const payload = Buffer.concat([msg, body]);
    const head = Buffer.alloc(4);
    head.writeUInt32BE((0x80000000 | payload.length) >>> 0);
    return new Promise((resolve, reject) => {
      this.waiting.set(xid, { resolve, reject });
      this.sock.write(Buffer.concat([head, payload]));
    });
  }
  close() { this.sock?.destroy(); }
}

const NFS = 100003;
const MOUNT = 100005;

async function client(local) {
  const rpc = new Rpc(local);
  await rpc.open();
  const m = await rpc.call(MOUNT, 3, 1, new W().str(exportPath).buf());
  const st = m.u32();
  if (st !== 0) throw new Error(`${local}: MNT ${exportPath} failed with ${st}`);
  const root = Buffer.from(m.opaque());
  const handles = [];
  for (const name of files) {
    let r = await rpc.call(NFS, 3, 3, new W().opaque(root).str(name).buf()); // LOOKUP
    let s = r.u32();
    if (s === 2) {
      // CREATE UNCHECKED with mode 0644, then WRITE 64 KiB FILE_SYNC.
      const sattr = new W().u32(1).u32(0o644).u32(0).u32(0).u32(0).u32(0).u32(0).buf();
      r = await rpc.call(NFS, 3, 8, Buffer.concat([new W().opaque(root).str(name).u32(0).buf(), sattr]));
      s = r.u32();
      if (s !== 0 && s !== 17) throw new Error(`${local}: CREATE ${name} failed with ${s}`);
      r = await rpc.call(NFS, 3, 3, new W().opaque(root).str(name).buf());
      s = r.u32();
      if (s === 0) {
        const fh = Buffer.from(r.opaque());
        const data = Buffer.alloc(65536, name.charCodeAt(1));
        await rpc.call(NFS, 3, 7, new W().opaque(fh).u64(0).u32(data.length).u32(2).opaque(data).buf());
        handles.push(fh);
        continue;
      }
    }
    if (s !== 0) throw new Error(`${local}: LOOKUP ${name} failed with ${s}`);
    handles.push(Buffer.from(r.opaque()));
  }
  return { rpc, handles };
}

const clients = await Promise.all(sources.map(client));
const until = Date.now() + seconds * 1000;
let reads = 0;
await Promise.all(
  clients.map(async ({ rpc, handles }, ci) => {
    let i = ci;
    while (Date.now() < until) {
      const started = Date.now();
      const fh = handles[i++ % handles.length];
      await rpc.call(NFS, 3, 6, new W().opaque(fh).u64(0).u32(8192).buf()); // READ
      reads++;
      const pause = 1000 / rate - (Date.now() - started);
      if (pause > 0) await new Promise((r) => setTimeout(r, pause));
    }
    rpc.close();
  }),
);
console.log(`nfs-load: ${reads} READs from ${sources.join(', ')} in ${seconds} s`);
