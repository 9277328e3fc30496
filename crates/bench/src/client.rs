//! The load generator's NFS client (NFSv3, and NFSv4.1 in `nfs4.rs`): one TCP
//! connection carries many calls at once.
//!
//! Why its own client: the kernel client and libnfs hide how many calls are in flight
//! and add their own caching, so neither can show what the server does with a given
//! queue depth. Here a caller `start`s calls (each gets a fresh xid and is written
//! whole under the connection's send lock) and `wait`s for them in any order; one
//! reader thread per connection matches replies to callers by xid. A workload keeps a
//! window of started calls per thread, which is how one thread streams at device speed.
//!
//! Invariants: every started call is answered exactly once, with its reply or with the
//! connection's error (when the connection dies, every pending call gets that error
//! and later calls fail at once); a reply whose xid nobody waits for is an error of
//! the server and ends the connection.

use anyhow::{anyhow, bail, Context, Result};
use nfs::proto::{Sattr, Status, FHSIZE3, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use nfs::rpc::{self, AuthSys, Credential};
use nfs::xdr::{Decoder, Encoder};
use std::collections::HashMap;
use std::io::{BufReader, IoSlice, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};

/// Where and how to connect: the server's NFS and MOUNT addresses and, optionally,
/// the local address to send from (so one host can act as several clients).
#[derive(Debug, Clone)]
pub struct Target {
    pub nfs: SocketAddr,
    pub mount: SocketAddr,
    pub bind: Option<IpAddr>,
    /// The protocol every connection to this target speaks.
    pub version: Version,
    /// NFSv4.1: take the delegations the server offers (each connection is then also
    /// its session's back channel, and answers recalls).
    pub delegations: bool,
}

/// NFSv3 (with MOUNT) or NFSv4.1 (a session per connection, COMPOUNDs of SEQUENCE,
/// PUTFH and the operation; I/O with the anonymous stateid, as a client without
/// open state would, and OPEN/CLOSE for creates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Version {
    #[default]
    #[serde(rename = "3")]
    V3,
    #[serde(rename = "4.1")]
    V41,
}

impl std::str::FromStr for Version {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Version> {
        match s {
            "3" => Ok(Version::V3),
            "4.1" | "4" => Ok(Version::V41),
            _ => bail!("NFS version '{s}': 3 or 4.1"),
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V3 => "3",
            Version::V41 => "4.1",
        })
    }
}

type Answer = std::result::Result<Vec<u8>, String>;

struct Shared {
    pending: Mutex<Pending>,
    /// File handles whose delegation the server recalled (CB_RECALL), until the
    /// holder gives it back.
    recalled: Mutex<std::collections::HashSet<Vec<u8>>>,
}

#[derive(Default)]
struct Pending {
    waiting: HashMap<u32, SyncSender<Answer>>,
    /// Set once the connection is dead: the reason every later call fails with.
    dead: Option<String>,
}

/// One RPC connection with many calls in flight.
pub struct Connection {
    /// Shared with the reader thread, which answers the server's callbacks.
    writer: Arc<Mutex<TcpStream>>,
    shared: Arc<Shared>,
    next_xid: AtomicU32,
    cred: Credential,
}

/// How long a call may go unanswered. The generator does not retransmit (over TCP a
/// server that stays silent this long has lost the call or stalled), so a run fails
/// with this reason instead of hanging.
pub const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A started call: `wait` returns its reply.
#[must_use = "a started call must be waited for"]
pub struct Call {
    rx: Receiver<Answer>,
    /// An NFSv4.1 call holds its session slot until its reply is taken.
    pub(crate) slot: Option<crate::nfs4::SlotGuard>,
}

impl Call {
    /// The reply's procedure results (after the RPC header, which is checked to say
    /// the call was accepted and succeeded at the RPC level).
    pub fn wait(self) -> Result<Reply> {
        let record = match self.rx.recv_timeout(REPLY_TIMEOUT) {
            Ok(answer) => answer.map_err(|e| anyhow!(e))?,
            Err(RecvTimeoutError::Timeout) => bail!(
                "no reply in {} s: the server dropped the call or stalled",
                REPLY_TIMEOUT.as_secs()
            ),
            Err(RecvTimeoutError::Disconnected) => bail!("connection closed"),
        };
        let v4 = self.slot.is_some();
        let mut reply = Reply::parse(record)?;
        reply.v4 = v4;
        Ok(reply)
    }
}

/// A reply record and where its procedure results start.
pub struct Reply {
    pub(crate) record: Vec<u8>,
    pub(crate) results_at: usize,
    /// A COMPOUND's reply (NFSv4.1).
    pub(crate) v4: bool,
}

impl Reply {
    /// The whole reply record (RPC header included), for callers that decode it
    /// themselves (an NFSv4 COMPOUND reply through `nfs::v4::client::decode_reply`).
    pub fn record(&self) -> &[u8] {
        &self.record
    }

    fn parse(record: Vec<u8>) -> Result<Reply> {
        let mut d = Decoder::new(&record);
        let _xid = d.u32()?;
        if d.u32()? != rpc::MSG_REPLY {
            bail!("not an RPC reply");
        }
        match d.u32()? {
            0 => {}
            1 => {
                let why = match d.u32()? {
                    0 => "RPC version mismatch".to_string(),
                    _ => format!(
                        "authentication refused (auth_stat {})",
                        d.u32().unwrap_or(0)
                    ),
                };
                bail!("call denied: {why}");
            }
            other => bail!("reply_stat {other} out of range"),
        }
        let _verf_flavor = d.u32()?;
        let _verf = d.opaque(400)?;
        match d.u32()? {
            0 => {}
            1 => bail!("program unavailable"),
            2 => bail!("program version mismatch"),
            3 => bail!("procedure unavailable"),
            4 => bail!("server could not decode the arguments (GARBAGE_ARGS)"),
            5 => bail!("server system error"),
            other => bail!("accept_stat {other}"),
        }
        let results_at = d.position();
        Ok(Reply {
            record,
            results_at,
            v4: false,
        })
    }

    pub fn decoder(&self) -> Decoder<'_> {
        Decoder::new(&self.record[self.results_at..])
    }
}

/// The credential of the load generator: root, so the file set can be made anywhere
/// the export allows (a server that squashes root maps it as it would any client's).
pub fn root_credential(machine: &str) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: machine.as_bytes().to_vec(),
        uid: 0,
        gid: 0,
        gids: vec![],
    })
}

/// Where a connection's xids start: spread over the xid space per connection and
/// process, because servers cache replies by client address and xid (the duplicate
/// request cache), and two connections from one host counting from 1 would look like
/// retransmissions of each other's calls.
fn first_xid() -> u32 {
    static CONNECTIONS: AtomicU32 = AtomicU32::new(0);
    let n = CONNECTIONS.fetch_add(1, Ordering::Relaxed) as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut rng = crate::data::Rng::new(nanos ^ ((std::process::id() as u64) << 32) ^ n);
    rng.next_u64() as u32
}

fn connect_from(addr: SocketAddr, bind: Option<IpAddr>) -> Result<TcpStream> {
    let stream = match bind {
        None => TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?,
        Some(ip) => {
            let domain = socket2::Domain::for_address(addr);
            let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
            socket
                .bind(&SocketAddr::new(ip, 0).into())
                .with_context(|| format!("binding to {ip}"))?;
            socket
                .connect(&addr.into())
                .with_context(|| format!("connecting to {addr} from {ip}"))?;
            socket.into()
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

impl Connection {
    pub fn connect(addr: SocketAddr, bind: Option<IpAddr>, cred: Credential) -> Result<Connection> {
        let stream = connect_from(addr, bind)?;
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            recalled: Mutex::new(Default::default()),
        });
        let reader_stream = stream.try_clone()?;
        let reader_shared = shared.clone();
        let writer = Arc::new(Mutex::new(stream));
        let reader_writer = writer.clone();
        std::thread::Builder::new()
            .name("bench-rpc-reader".into())
            .spawn(move || read_replies(reader_stream, reader_shared, reader_writer))?;
        Ok(Connection {
            writer,
            shared,
            next_xid: AtomicU32::new(first_xid()),
            cred,
        })
    }

    /// Sends one call; `args` appends the procedure's arguments.
    pub fn start(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: impl FnOnce(&mut Encoder),
    ) -> Result<Call> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let mut e = rpc::encode_call(xid, program, version, procedure, &self.cred);
        args(&mut e);
        let body = e.buf;
        assert!(body.len() < nfs::transport::LAST_FRAGMENT as usize);
        let (tx, rx) = sync_channel(1);
        {
            let mut p = self.shared.pending.lock().unwrap();
            if let Some(why) = &p.dead {
                bail!("connection is closed: {why}");
            }
            p.waiting.insert(xid, tx);
        }
        let mark = (nfs::transport::LAST_FRAGMENT | body.len() as u32).to_be_bytes();
        let sent = {
            let mut w = self.writer.lock().unwrap();
            write_all_vectored(&mut w, &[&mark, &body])
        };
        if let Err(e) = sent {
            let why = format!("sending a call: {e}");
            fail_all(&self.shared, &why);
            bail!(why);
        }
        Ok(Call { rx, slot: None })
    }

    /// Whether the server recalled the delegation of `fh` (and it was not given back
    /// with `returned` yet).
    pub fn recalled(&self, fh: &[u8]) -> bool {
        self.shared.recalled.lock().unwrap().contains(fh)
    }

    /// The delegation of `fh` was given back (or is gone).
    pub fn returned(&self, fh: &[u8]) {
        self.shared.recalled.lock().unwrap().remove(fh);
    }

    pub fn call(
        &self,
        program: u32,
        version: u32,
        procedure: u32,
        args: impl FnOnce(&mut Encoder),
    ) -> Result<Reply> {
        self.start(program, version, procedure, args)?.wait()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Ends the reader thread (its read fails) without waiting for the server.
        let _ = self
            .writer
            .lock()
            .unwrap()
            .shutdown(std::net::Shutdown::Both);
    }
}

fn write_all_vectored(w: &mut TcpStream, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut bufs: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    while !bufs.is_empty() {
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        let mut n = w.write_vectored(&slices)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            if n >= bufs[0].len() {
                n -= bufs[0].len();
                bufs.remove(0);
            } else {
                bufs[0] = &bufs[0][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

fn fail_all(shared: &Shared, why: &str) {
    let mut p = shared.pending.lock().unwrap();
    if p.dead.is_none() {
        p.dead = Some(why.to_string());
    }
    for (_, tx) in p.waiting.drain() {
        let _ = tx.send(Err(why.to_string()));
    }
}

fn read_replies(stream: TcpStream, shared: Arc<Shared>, writer: Arc<Mutex<TcpStream>>) {
    // Smaller than a READ reply, so payloads are read straight into their record and
    // only headers pass through the buffer.
    let mut r = BufReader::with_capacity(32 << 10, stream);
    loop {
        let record = match nfs::transport::read_reply_record(&mut r) {
            Ok(rec) => rec,
            Err(e) => {
                fail_all(&shared, &format!("reading a reply: {e}"));
                return;
            }
        };
        if record.len() < 4 {
            fail_all(&shared, "a reply shorter than its xid");
            return;
        }
        let xid = u32::from_be_bytes(record[0..4].try_into().unwrap());
        if record.get(4..8) == Some(&rpc::MSG_CALL.to_be_bytes()[..]) {
            // The server calling back on the session's back channel.
            let answered = crate::nfs4::answer_callback(&record).and_then(|(reply, recalls)| {
                shared.recalled.lock().unwrap().extend(recalls);
                let mark = (nfs::transport::LAST_FRAGMENT | reply.len() as u32).to_be_bytes();
                write_all_vectored(&mut writer.lock().unwrap(), &[&mark, &reply])
                    .map_err(|e| anyhow!("answering a callback: {e}"))
            });
            if let Err(e) = answered {
                fail_all(&shared, &format!("a callback: {e:#}"));
                return;
            }
            continue;
        }
        let tx = shared.pending.lock().unwrap().waiting.remove(&xid);
        match tx {
            Some(tx) => {
                let _ = tx.send(Ok(record));
            }
            None => {
                fail_all(&shared, &format!("a reply to xid {xid}, which no call has"));
                return;
            }
        }
    }
}

/// A server's write verifier (WRITE and COMMIT replies): it changes when the server
/// restarts, so UNSTABLE data it had not committed may be gone.
pub type Verifier = [u8; 8];

/// An NFSv3 file handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fh(pub Vec<u8>);

/// An NFS procedure answered with a status other than NFS3_OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfsStatus(pub u32);

impl std::fmt::Display for NfsStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match Status::from_code(self.0) {
            Some(s) => write!(f, "NFS3ERR_{s:?} ({})", self.0),
            None => write!(f, "NFS status {}", self.0),
        }
    }
}

impl std::error::Error for NfsStatus {}

impl NfsStatus {
    pub fn of(e: &anyhow::Error) -> Option<u32> {
        e.downcast_ref::<NfsStatus>().map(|s| s.0)
    }
}

/// The attributes the load generator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ftype: u32,
    pub size: u64,
    pub fileid: u64,
}

const FATTR3_BYTES: usize = 84;

fn fattr(d: &mut Decoder<'_>) -> Result<Attr> {
    let raw = d.fixed(FATTR3_BYTES)?;
    let be64 = |at: usize| u64::from_be_bytes(raw[at..at + 8].try_into().unwrap());
    Ok(Attr {
        ftype: u32::from_be_bytes(raw[0..4].try_into().unwrap()),
        size: be64(20),
        fileid: be64(52),
    })
}

/// post_op_attr: the attributes when the server sent them.
pub fn post_op_attr(d: &mut Decoder<'_>) -> Result<Option<Attr>> {
    if d.bool()? {
        Ok(Some(fattr(d)?))
    } else {
        Ok(None)
    }
}

/// wcc_data: skips the pre-op attributes, returns the post-op ones.
pub fn wcc_data(d: &mut Decoder<'_>) -> Result<Option<Attr>> {
    if d.bool()? {
        d.fixed(24)?; // pre_op_attr: size, mtime, ctime
    }
    post_op_attr(d)
}

pub(crate) fn status(d: &mut Decoder<'_>) -> Result<()> {
    match d.u32()? {
        0 => Ok(()),
        s => Err(NfsStatus(s).into()),
    }
}

fn fh_arg(e: &mut Encoder, fh: &Fh) {
    e.opaque(&fh.0);
}

fn diropargs(e: &mut Encoder, dir: &Fh, name: &str) {
    fh_arg(e, dir);
    e.opaque(name.as_bytes());
}

/// WRITE's `stable_how`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stable {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

/// A READ's answer; `data` is the range of the reply record holding the bytes.
pub struct ReadOk {
    pub reply: Reply,
    pub data: std::ops::Range<usize>,
    pub eof: bool,
}

impl ReadOk {
    pub fn bytes(&self) -> &[u8] {
        &self.reply.record[self.reply.results_at..][self.data.clone()]
    }
}

/// NFS operations over one connection (each has a `start_` form that returns the
/// in-flight call and a parser for its reply, for pipelined use): NFSv3 procedures,
/// or with a session (`v4`) the same operations as NFSv4.1 COMPOUNDs.
pub struct Nfs {
    pub conn: Connection,
    pub(crate) v4: Option<crate::nfs4::Session>,
}

pub mod procs {
    pub const GETATTR: u32 = 1;
    pub const SETATTR: u32 = 2;
    pub const LOOKUP: u32 = 3;
    pub const READ: u32 = 6;
    pub const WRITE: u32 = 7;
    pub const CREATE: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const REMOVE: u32 = 12;
    pub const RMDIR: u32 = 13;
    pub const RENAME: u32 = 14;
    pub const COMMIT: u32 = 21;
}

impl Nfs {
    pub fn connect(target: &Target, cred: Credential) -> Result<Nfs> {
        let conn = Connection::connect(target.nfs, target.bind, cred)?;
        let v4 = match target.version {
            Version::V3 => None,
            Version::V41 => Some(crate::nfs4::Session::create(&conn, target.delegations)?),
        };
        Ok(Nfs { conn, v4 })
    }

    fn call(&self, procedure: u32, args: impl FnOnce(&mut Encoder)) -> Result<Reply> {
        self.conn.call(NFS_PROGRAM, NFS_V3, procedure, args)
    }

    pub fn getattr(&self, fh: &Fh) -> Result<Attr> {
        if let Some(s) = &self.v4 {
            return self.v4_getattr(s, fh);
        }
        let r = self.call(procs::GETATTR, |e| fh_arg(e, fh))?;
        let mut d = r.decoder();
        status(&mut d)?;
        fattr(&mut d)
    }

    /// Sets the size (truncating or extending).
    pub fn truncate(&self, fh: &Fh, size: u64) -> Result<()> {
        if let Some(s) = &self.v4 {
            return self.v4_truncate(s, fh, size);
        }
        let r = self.call(procs::SETATTR, |e| {
            fh_arg(e, fh);
            nfs::proto::encode_sattr(
                e,
                &Sattr {
                    size: Some(size),
                    ..Sattr::default()
                },
            );
            e.bool(false); // no guard
        })?;
        status(&mut r.decoder())
    }

    /// `None` when the name does not exist.
    pub fn lookup(&self, dir: &Fh, name: &str) -> Result<Option<(Fh, Option<Attr>)>> {
        if let Some(s) = &self.v4 {
            return self.v4_lookup(s, dir, name);
        }
        let r = self.call(procs::LOOKUP, |e| diropargs(e, dir, name))?;
        let mut d = r.decoder();
        match status(&mut d) {
            Ok(()) => {}
            Err(e) if NfsStatus::of(&e) == Some(Status::NoEnt as u32) => return Ok(None),
            Err(e) => return Err(e.context(format!("LOOKUP {name}"))),
        }
        let fh = Fh(d.opaque(FHSIZE3)?.to_vec());
        let attr = post_op_attr(&mut d)?;
        Ok(Some((fh, attr)))
    }

    /// The handle a CREATE or MKDIR returned or, when the server left it out (it may),
    /// the one LOOKUP finds.
    fn new_object(&self, r: Reply, dir: &Fh, what: &str, name: &str) -> Result<Fh> {
        let mut d = r.decoder();
        status(&mut d).with_context(|| format!("{what} {name}"))?;
        if let Some(fh) = d.optional(|d| d.opaque(FHSIZE3))? {
            return Ok(Fh(fh.to_vec()));
        }
        self.found(dir, name, what)
    }

    fn found(&self, dir: &Fh, name: &str, what: &str) -> Result<Fh> {
        self.lookup(dir, name)?
            .map(|(fh, _)| fh)
            .ok_or_else(|| anyhow!("{what} {name}: done, but the name is not found"))
    }

    /// CREATE UNCHECKED with mode 0644 (an existing file is opened, and truncated to 0
    /// when `truncate`).
    pub fn create(&self, dir: &Fh, name: &str, truncate: bool) -> Result<Fh> {
        if let Some(s) = &self.v4 {
            return self.v4_create(s, dir, name, truncate);
        }
        let r = self.call(procs::CREATE, |e| {
            diropargs(e, dir, name);
            e.u32(0); // UNCHECKED
            nfs::proto::encode_sattr(
                e,
                &Sattr {
                    mode: Some(0o644),
                    size: truncate.then_some(0),
                    ..Sattr::default()
                },
            );
        })?;
        self.new_object(r, dir, "CREATE", name)
    }

    /// A new file `name` in `dir` holding `data`, on stable storage when this
    /// returns: over NFSv3 CREATE (UNCHECKED, mode 0644, size 0) then a FILE_SYNC
    /// WRITE, as a client's close of a small file it wrote sends it; over NFSv4.1 one
    /// COMPOUND of OPEN, WRITE and CLOSE (`v4_create_with_data`), with the
    /// delegation the server handed out if this client takes them.
    pub fn create_with_data(
        &self,
        dir: &Fh,
        name: &str,
        data: &[u8],
    ) -> Result<(Fh, Option<nfs::v4::client::Stateid>)> {
        if let Some(s) = &self.v4 {
            return self.v4_create_with_data(s, dir, name, data);
        }
        let fh = self.create(dir, name, true)?;
        self.write(&fh, 0, data, Stable::FileSync)
            .with_context(|| format!("WRITE {name}"))?;
        Ok((fh, None))
    }

    /// REMOVE of `name` (handle `fh`) in `dir`, giving back the delegation this
    /// client holds of it in the same COMPOUND (NFSv4.1 only).
    pub fn remove_delegated(
        &self,
        dir: &Fh,
        name: &str,
        fh: &Fh,
        deleg: &nfs::v4::client::Stateid,
    ) -> Result<bool> {
        let s = self.v4.as_ref().context("a delegation over NFSv3")?;
        self.v4_return_and_remove(s, dir, name, fh, deleg)
    }

    /// DELEGRETURN of the delegation this client holds of `fh` (NFSv4.1 only).
    pub fn delegreturn(&self, fh: &Fh, deleg: &nfs::v4::client::Stateid) -> Result<()> {
        let s = self.v4.as_ref().context("a delegation over NFSv3")?;
        self.v4_delegreturn(s, fh, deleg)
    }

    /// Opens `name` (handle `fh`) in `dir`, reads up to `count` bytes from its start
    /// and closes it; the bytes read. NFSv3 has no open or close: one READ of the
    /// handle, the least any v3 client sends. NFSv4.1: one COMPOUND of OPEN by name,
    /// READ and CLOSE (`v4_open_read_close`).
    pub fn open_read_close(&self, dir: &Fh, name: &str, fh: &Fh, count: u32) -> Result<usize> {
        if let Some(s) = &self.v4 {
            return self.v4_open_read_close(s, dir, name, count);
        }
        Ok(self.read(fh, 0, count)?.bytes().len())
    }

    /// MKDIR, or the existing directory of that name.
    pub fn mkdir_p(&self, dir: &Fh, name: &str) -> Result<Fh> {
        if let Some((fh, _)) = self.lookup(dir, name)? {
            return Ok(fh);
        }
        if let Some(s) = &self.v4 {
            return self.v4_mkdir(s, dir, name);
        }
        let r = self.call(procs::MKDIR, |e| {
            diropargs(e, dir, name);
            nfs::proto::encode_sattr(
                e,
                &Sattr {
                    mode: Some(0o755),
                    ..Sattr::default()
                },
            );
        })?;
        match self.new_object(r, dir, "MKDIR", name) {
            // Another client made it first.
            Err(e) if NfsStatus::of(&e) == Some(Status::Exist as u32) => {
                self.found(dir, name, "MKDIR")
            }
            other => other,
        }
    }

    /// REMOVE; a missing name is not an error (`false`).
    pub fn remove(&self, dir: &Fh, name: &str) -> Result<bool> {
        if let Some(s) = &self.v4 {
            return self.v4_remove(s, dir, name);
        }
        let r = self.call(procs::REMOVE, |e| diropargs(e, dir, name))?;
        match status(&mut r.decoder()) {
            Ok(()) => Ok(true),
            Err(e) if NfsStatus::of(&e) == Some(Status::NoEnt as u32) => Ok(false),
            Err(e) => Err(e.context(format!("REMOVE {name}"))),
        }
    }

    /// RENAME of `from` in `from_dir` to `to` in `to_dir` (replacing a file there).
    pub fn rename(&self, from_dir: &Fh, from: &str, to_dir: &Fh, to: &str) -> Result<()> {
        if let Some(s) = &self.v4 {
            return self.v4_rename(s, from_dir, from, to_dir, to);
        }
        let r = self.call(procs::RENAME, |e| {
            diropargs(e, from_dir, from);
            diropargs(e, to_dir, to);
        })?;
        status(&mut r.decoder()).with_context(|| format!("RENAME {from} {to}"))
    }

    pub fn rmdir(&self, dir: &Fh, name: &str) -> Result<bool> {
        if let Some(s) = &self.v4 {
            return self.v4_remove(s, dir, name);
        }
        let r = self.call(procs::RMDIR, |e| diropargs(e, dir, name))?;
        match status(&mut r.decoder()) {
            Ok(()) => Ok(true),
            Err(e) if NfsStatus::of(&e) == Some(Status::NoEnt as u32) => Ok(false),
            Err(e) => Err(e.context(format!("RMDIR {name}"))),
        }
    }

    pub fn start_read(&self, fh: &Fh, offset: u64, count: u32) -> Result<Call> {
        if let Some(s) = &self.v4 {
            return self.v4_start_read(s, fh, offset, count);
        }
        self.conn.start(NFS_PROGRAM, NFS_V3, procs::READ, |e| {
            fh_arg(e, fh);
            e.u64(offset).u32(count);
        })
    }

    pub fn finish_read(reply: Reply) -> Result<ReadOk> {
        if reply.v4 {
            return crate::nfs4::finish_read(reply);
        }
        let (data, eof) = {
            let mut d = reply.decoder();
            status(&mut d).context("READ")?;
            post_op_attr(&mut d)?;
            let count = d.u32()? as usize;
            let eof = d.bool()?;
            let start = d.position() + 4;
            let bytes = d.opaque(usize::MAX)?;
            if bytes.len() != count {
                bail!("READ said {count} bytes but carried {}", bytes.len());
            }
            (start..start + count, eof)
        };
        Ok(ReadOk { reply, data, eof })
    }

    pub fn read(&self, fh: &Fh, offset: u64, count: u32) -> Result<ReadOk> {
        Self::finish_read(self.start_read(fh, offset, count)?.wait()?)
    }

    pub fn start_write(&self, fh: &Fh, offset: u64, data: &[u8], stable: Stable) -> Result<Call> {
        if let Some(s) = &self.v4 {
            return self.v4_start_write(s, fh, offset, data, stable);
        }
        self.conn.start(NFS_PROGRAM, NFS_V3, procs::WRITE, |e| {
            fh_arg(e, fh);
            e.u64(offset)
                .u32(data.len() as u32)
                .u32(stable as u32)
                .opaque(data);
        })
    }

    /// Checks a WRITE's reply: all bytes taken, at least as stable as asked. Returns
    /// the server's write verifier (an UNSTABLE write is stable once a COMMIT answers
    /// with the same one).
    pub fn finish_write(reply: Reply, len: usize, stable: Stable) -> Result<Verifier> {
        if reply.v4 {
            return crate::nfs4::finish_write(reply, len, stable);
        }
        let mut d = reply.decoder();
        status(&mut d).context("WRITE")?;
        wcc_data(&mut d)?;
        write_result(&mut d, len, stable)
    }

    pub fn write(&self, fh: &Fh, offset: u64, data: &[u8], stable: Stable) -> Result<()> {
        Self::finish_write(
            self.start_write(fh, offset, data, stable)?.wait()?,
            data.len(),
            stable,
        )
        .map(|_| ())
    }

    pub fn commit(&self, fh: &Fh) -> Result<()> {
        self.commit_verifier(fh).map(|_| ())
    }

    /// COMMIT of the whole file; returns the server's write verifier.
    pub fn commit_verifier(&self, fh: &Fh) -> Result<Verifier> {
        if let Some(s) = &self.v4 {
            return self.v4_commit(s, fh);
        }
        let r = self.call(procs::COMMIT, |e| {
            fh_arg(e, fh);
            e.u64(0).u32(0);
        })?;
        let mut d = r.decoder();
        status(&mut d).context("COMMIT")?;
        wcc_data(&mut d)?;
        Ok(d.fixed(8)?.try_into().unwrap())
    }
}

/// WRITE's count, committed and verifier (the same in NFSv3 and NFSv4): all bytes
/// taken, at least as stable as asked; the verifier.
pub(crate) fn write_result(d: &mut Decoder<'_>, len: usize, stable: Stable) -> Result<Verifier> {
    let count = d.u32()? as usize;
    let committed = d.u32()?;
    if count != len {
        bail!("WRITE took {count} of {len} bytes");
    }
    if committed < stable as u32 {
        bail!(
            "WRITE asked stable_how {} but got {committed}",
            stable as u32
        );
    }
    Ok(d.fixed(8)?.try_into().unwrap())
}

/// The root handle of `export`: MOUNT v3 MNT, or over NFSv4.1 LOOKUPs from the
/// pseudo root.
pub fn mount(target: &Target, export: &str, cred: Credential) -> Result<Fh> {
    if target.version == Version::V41 {
        return Nfs::connect(target, cred)?.v4_mount(export);
    }
    let conn = Connection::connect(target.mount, target.bind, cred)?;
    let r = conn
        .call(MOUNT_PROGRAM, MOUNT_V3, 1, |e| {
            e.opaque(export.as_bytes());
        })
        .with_context(|| format!("MOUNT {export}"))?;
    let mut d = r.decoder();
    match d.u32()? {
        0 => Ok(Fh(d.opaque(FHSIZE3)?.to_vec())),
        s => Err(anyhow::Error::new(NfsStatus(s)).context(format!("MOUNT {export} refused"))),
    }
}

/// Walks `path` (slash-separated, relative to `root`), making directories on the way.
pub fn mkdir_path(nfs: &Nfs, root: &Fh, path: &str) -> Result<Fh> {
    let mut fh = root.clone();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        fh = nfs.mkdir_p(&fh, part).map_err(|e| {
            if NfsStatus::of(&e) == Some(Status::Acces as u32) {
                e.context(format!(
                    "making {path}: the server refused the load generator (root, uid 0); share with no_root_squash, or make {path} writable by everyone"
                ))
            } else {
                e
            }
        })?;
    }
    Ok(fh)
}

/// The NFS and MOUNT addresses of `server` (`host:port`, or `host` for port 2049).
pub fn resolve_server(server: &str, mount_port: Option<u16>) -> Result<(SocketAddr, SocketAddr)> {
    use std::net::ToSocketAddrs;
    let nfs = if let Ok(a) = server.parse::<SocketAddr>() {
        a
    } else if let Ok(ip) = server.parse::<IpAddr>() {
        SocketAddr::new(ip, 2049)
    } else {
        let found = if server.contains(':') {
            server.to_socket_addrs()
        } else {
            (server, 2049).to_socket_addrs()
        };
        found
            .with_context(|| format!("server '{server}' is not host:port"))?
            .next()
            .ok_or_else(|| anyhow!("server '{server}' resolves to no address"))?
    };
    let mount = SocketAddr::new(nfs.ip(), mount_port.unwrap_or(nfs.port()));
    Ok((nfs, mount))
}
