//! A pipelined NFSv3 client for benchmarks: each stream is one TCP connection with up
//! to `--depth` calls in flight (a writer thread sends while credits last, a reader
//! thread takes replies and returns credits), so the figures measure the server, not
//! a client waiting on round trips. Works against any NFSv3 server (shoal, Ganesha).
//!
//! Tests: `write` (sequential UNSTABLE writes then COMMIT, per stream its own file),
//! `read` (sequential reads of those files, `--passes` times), `randread` (random reads within them for
//! `--seconds`), `syncwrite` (random FILE_SYNC writes for `--seconds`). Every reply
//! is checked (RPC accepted, NFS3_OK, READ returns what was asked); prints one JSON
//! object. `remove` deletes the streams' files through the server (so a server that
//! caches names, as Ganesha does, never sees them vanish behind its back).

use clap::Parser;
use nfs::proto::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs::rpc::{self, AuthSys, Credential};
use nfs::xdr::{Decoder, Encoder};
use nfs::RpcClient;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser, Clone)]
struct Args {
    /// NFS server address.
    #[arg(long)]
    server: SocketAddr,
    /// MOUNT port (default: the NFS port).
    #[arg(long)]
    mount_port: Option<u16>,
    /// Exported path.
    #[arg(long)]
    export: String,
    /// write, read, randread, syncwrite or remove.
    #[arg(long)]
    test: String,
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Calls in flight per stream.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Bytes per call.
    #[arg(long, default_value_t = 131072)]
    block: u32,
    /// Size of each stream's file (MiB).
    #[arg(long, default_value_t = 1024)]
    file_mib: u64,
    /// Duration of randread and syncwrite.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Times `read` reads each stream's file, start to end (a cached file set small
    /// enough for every server's cache still makes a run long enough to measure).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    passes: u64,
    /// Stream i's file is NAME-i in the export's root (another name keeps another
    /// test's files apart, e.g. small prefilled files for sync writes).
    #[arg(long, default_value = "nfs-bench")]
    name: String,
}

fn root() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: b"nfs-bench".to_vec(),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

/// The results after the RPC header, checked to be an accepted success.
fn results(reply: &[u8]) -> &[u8] {
    let mut d = Decoder::new(reply);
    let _xid = d.u32().unwrap();
    assert_eq!(d.u32().unwrap(), rpc::MSG_REPLY);
    assert_eq!(d.u32().unwrap(), 0, "MSG_ACCEPTED");
    let _flavor = d.u32().unwrap();
    let _verf = d.opaque(400).unwrap();
    assert_eq!(d.u32().unwrap(), 0, "accept SUCCESS");
    d.rest()
}

fn skip_post_op_attr(d: &mut Decoder<'_>) {
    if d.bool().unwrap() {
        d.fixed(84).unwrap();
    }
}

fn root_handle(args: &Args) -> Vec<u8> {
    let mut addr = args.server;
    addr.set_port(args.mount_port.unwrap_or(args.server.port()));
    let mut c = RpcClient::connect(addr).expect("connect to MOUNT");
    let mut e = Encoder::new();
    e.opaque(args.export.as_bytes());
    let r = c.call(MOUNT_PROGRAM, MOUNT_V3, 1, &root(), &e.buf).unwrap();
    let mut d = Decoder::new(results(&r));
    assert_eq!(d.u32().unwrap(), 0, "MNT {}", args.export);
    d.opaque(64).unwrap().to_vec()
}

/// CREATE (UNCHECKED: an existing file is reused) of `name`; its handle.
fn file_handle(c: &mut RpcClient, dir: &[u8], name: &str) -> Vec<u8> {
    let mut e = Encoder::new();
    e.opaque(dir).opaque(name.as_bytes()).u32(0);
    // sattr3: mode 0644, nothing else.
    e.bool(true)
        .u32(0o644)
        .bool(false)
        .bool(false)
        .bool(false)
        .u32(0)
        .u32(0);
    let r = c.call(NFS_PROGRAM, NFS_V3, 8, &root(), &e.buf).unwrap();
    let mut d = Decoder::new(results(&r));
    assert_eq!(d.u32().unwrap(), 0, "CREATE {name}");
    assert!(d.bool().unwrap(), "CREATE returns a handle");
    d.opaque(64).unwrap().to_vec()
}

/// One stream: sends `calls` (offset, is_write) while credits last; returns the
/// number of calls answered and the bytes they moved.
fn pipeline(
    args: &Args,
    fh: &[u8],
    next: &mut dyn FnMut() -> Option<u64>,
    write: Option<u32>,
) -> (u64, u64) {
    let stream = TcpStream::connect(args.server).expect("connect to NFS");
    stream.set_nodelay(true).unwrap();
    let reader_stream = stream.try_clone().unwrap();
    let (credit_tx, credit_rx) = mpsc::sync_channel::<()>(args.depth);
    for _ in 0..args.depth {
        credit_tx.send(()).unwrap();
    }
    let (sent_tx, sent_rx) = mpsc::channel::<Option<()>>();
    let block = args.block;
    let reader = std::thread::spawn(move || {
        let mut c = RpcClient::from_stream(reader_stream);
        let (mut calls, mut bytes) = (0u64, 0u64);
        while let Ok(Some(())) = sent_rx.recv() {
            let reply = c.read_reply().expect("a reply");
            let mut d = Decoder::new(results(&reply));
            assert_eq!(d.u32().unwrap(), 0, "NFS3_OK");
            skip_post_op_attr(&mut d);
            if write.is_none() {
                let count = d.u32().unwrap();
                let _eof = d.bool().unwrap();
                let data = d.opaque(block as usize).unwrap();
                assert_eq!(data.len(), count as usize);
                bytes += count as u64;
            } else {
                bytes += block as u64;
            }
            calls += 1;
            let _ = credit_tx.send(());
        }
        (calls, bytes)
    });
    let mut c = RpcClient::from_stream(stream);
    let payload = vec![0x5au8; block as usize];
    let mut xid = 1u32;
    while let Some(offset) = next() {
        credit_rx.recv().unwrap();
        let (procedure, mut e) = match write {
            Some(stable) => {
                let mut e = Encoder::new();
                e.opaque(fh)
                    .u64(offset)
                    .u32(block)
                    .u32(stable)
                    .opaque(&payload);
                (7, e)
            }
            None => {
                let mut e = Encoder::new();
                e.opaque(fh).u64(offset).u32(block);
                (6, e)
            }
        };
        let mut call = rpc::encode_call(xid, NFS_PROGRAM, NFS_V3, procedure, &root());
        call.buf.append(&mut e.buf);
        xid = xid.wrapping_add(1);
        sent_tx.send(Some(())).unwrap();
        c.send_raw(&call.buf).expect("send");
    }
    sent_tx.send(None).unwrap();
    reader.join().unwrap()
}

fn commit(args: &Args, fh: &[u8]) {
    let mut c = RpcClient::connect(args.server).unwrap();
    let mut e = Encoder::new();
    e.opaque(fh).u64(0).u32(0);
    let r = c.call(NFS_PROGRAM, NFS_V3, 21, &root(), &e.buf).unwrap();
    assert_eq!(Decoder::new(results(&r)).u32().unwrap(), 0, "COMMIT");
}

/// A small deterministic generator (xorshift) for random offsets.
fn offsets(seed: u64, blocks: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % blocks
    }
}

/// REMOVEs each stream's file; a file that is not there is fine.
fn remove_files(args: &Args, dir: &[u8]) {
    let mut c = RpcClient::connect(args.server).unwrap();
    for i in 0..args.streams {
        let mut e = Encoder::new();
        e.opaque(dir)
            .opaque(format!("{}-{i}", args.name).as_bytes());
        let r = c.call(NFS_PROGRAM, NFS_V3, 12, &root(), &e.buf).unwrap();
        let status = Decoder::new(results(&r)).u32().unwrap();
        assert!(
            status == 0 || status == 2,
            "REMOVE {}-{i}: status {status}",
            args.name
        );
    }
    println!(
        "{}",
        serde_json::json!({"test": "remove", "streams": args.streams})
    );
}

fn main() {
    let args = Args::parse();
    let dir = root_handle(&args);
    if args.test == "remove" {
        remove_files(&args, &dir);
        return;
    }
    let file_bytes = args.file_mib << 20;
    let blocks = file_bytes / args.block as u64;
    assert!(blocks > 0, "--file-mib is smaller than one block");
    let start = Instant::now();
    let results: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.streams)
            .map(|i| {
                let args = args.clone();
                let dir = dir.clone();
                s.spawn(move || {
                    let mut c = RpcClient::connect(args.server).unwrap();
                    let fh = file_handle(&mut c, &dir, &format!("{}-{i}", args.name));
                    let deadline = Instant::now() + Duration::from_secs(args.seconds);
                    let block = args.block as u64;
                    match args.test.as_str() {
                        "write" | "read" => {
                            let write = (args.test == "write").then_some(0);
                            let calls = if write.is_some() {
                                blocks
                            } else {
                                blocks * args.passes
                            };
                            let mut n = 0;
                            let mut next = || {
                                (n < calls).then(|| {
                                    n += 1;
                                    (n - 1) % blocks * block
                                })
                            };
                            let r = pipeline(&args, &fh, &mut next, write);
                            if write.is_some() {
                                commit(&args, &fh);
                            }
                            r
                        }
                        "randread" | "syncwrite" => {
                            let mut pick = offsets(0x9e37_79b9 * (i as u64 + 1), blocks);
                            let mut next = || (Instant::now() < deadline).then(|| pick() * block);
                            let write = (args.test == "syncwrite").then_some(2);
                            pipeline(&args, &fh, &mut next, write)
                        }
                        t => {
                            panic!("unknown --test {t}: write, read, randread, syncwrite or remove")
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let calls: u64 = results.iter().map(|r| r.0).sum();
    let bytes: u64 = results.iter().map(|r| r.1).sum();
    println!(
        "{}",
        serde_json::json!({
            "test": args.test,
            "streams": args.streams,
            "depth": args.depth,
            "block": args.block,
            "seconds": seconds,
            "calls": calls,
            "bytes": bytes,
            "mb_per_s": bytes as f64 / seconds / 1e6,
            "iops": calls as f64 / seconds,
            // The client's share of the host's CPU, to tell it from the server's.
            "client_cpu_s": analytics::cpu::process_seconds(),
        })
    );
}
