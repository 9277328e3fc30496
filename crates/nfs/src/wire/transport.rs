//! ONC RPC over TCP: record marking, many calls in flight per connection, replies in
//! any order.
//!
//! Each connection has a reader thread that reads whole records (RFC 5531 section 11:
//! fragments of up to 2^31-1 bytes, the last one flagged) straight into the buffer the
//! call is decoded from, so a WRITE's payload is never copied again on its way to the
//! filesystem. Records go to a shared pool of workers; each reply is written with one
//! vectored write (record mark and header, then bulk data such as a READ's, then its
//! padding) under the connection's write lock, in whatever order calls finish.
//!
//! Bounds: a record longer than `MAX_RECORD_BYTES` closes the connection (no reply can
//! be made to a call that was not read); at most `MAX_IN_FLIGHT` calls of one
//! connection are queued or running, after which its reader stops reading, so a fast
//! client is slowed by TCP flow control rather than refused; at most `MAX_CONNECTIONS`
//! connections are served at once. Over all connections, the records read and not
//! yet answered hold at most `MAX_BUFFERED_BYTES`: a reader claims a record's length
//! from that budget when its record mark arrives (the largest record when it comes in
//! several fragments) and waits, reading nothing, while the budget is spent; the claim
//! is given back when the call is answered. So request memory is bounded whatever
//! clients send, and a reader never holds part of the budget while it waits for more.
//! A record whose bytes stop coming for `STALLED_RECORD` closes its connection, so a
//! client cannot sit on a claim.
//!
//! Calls that need no device I/O (READs of cached data: `Service::call_cached`) are
//! answered by the reader itself, without the hand-off to a worker and back: on a
//! stream from cache that hand-off, two thread wake-ups a call, cost more than the
//! call. While the reader writes such a reply it reads nothing, so a client that does
//! not take its replies is slowed by TCP flow control, as `MAX_IN_FLIGHT` slows it.
//! So are calls the service allows (`Service::may_run_inline`, e.g. a sync WRITE)
//! when they are alone on their connection: nothing in flight and nothing more sent
//! (a peek at the socket). A client that sends one call at a time, as a database's
//! sync writer does, then costs no hand-off at all; one that sends the next call
//! meanwhile waits at most this call's time before its calls go to workers again.
//!
//! The back channel: a service may call the client back on the connection a call
//! came on (`Call::back`, NFSv4.1 callbacks). Its call goes out under the same write
//! lock as replies; the client's reply is a record of type REPLY, which the reader
//! hands to the waiting caller by xid instead of to a worker. A reply nobody waits
//! for (too late) is dropped.
//!
//! Written on std threads rather than an async runtime: every call ends in blocking
//! filesystem and pool work, so a worker pool is what an async server would need
//! anyway, and the path stays short.

use crate::rpc::{self, Accept, AuthStat, CallHeader, HeaderError};
use crate::xdr::{Decoder, Encoder};
use analytics::Ticks;
use std::collections::HashMap;
use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use vdev::work_queue::{QueueSender, WorkQueue};

pub use pool::ReadBuf;

/// Largest record accepted: a 1 MiB WRITE and its headers.
pub const MAX_RECORD_BYTES: usize = (1 << 20) + (64 << 10);
pub const MAX_IN_FLIGHT: usize = 64;
pub const MAX_CONNECTIONS: usize = 1024;
/// Request bytes read and not yet answered, over all connections.
pub const MAX_BUFFERED_BYTES: usize = 128 << 20;
/// How long a record may wait for its next bytes once its mark has arrived.
pub const STALLED_RECORD: std::time::Duration = std::time::Duration::from_secs(120);
/// The record-marking bit of the last fragment of a record (RFC 5531 section 11).
pub const LAST_FRAGMENT: u32 = 0x8000_0000;

/// One decoded call, as a service sees it.
pub struct Call<'a> {
    pub peer: SocketAddr,
    /// When the whole record had been read (the start of the call's latency), on
    /// analytics' clock, which is cheaper to read than `Instant` (`analytics::clock`).
    pub received: Ticks,
    pub header: CallHeader,
    pub record: &'a [u8],
    /// The connection the call came on, for calls back to the client (none when
    /// the call did not come over a connection, as in the fuzz harness).
    pub back: Option<Arc<dyn BackChannel>>,
}

/// Calls from the server to the client on a client's connection.
pub trait BackChannel: Send + Sync {
    /// Sends the record `call(xid)` makes (a whole RPC call) and waits up to
    /// `timeout` for the reply record with that xid.
    fn call(&self, call: &dyn Fn(u32) -> Vec<u8>, timeout: Duration) -> std::io::Result<Vec<u8>>;
    /// Whether the connection is still there.
    fn is_open(&self) -> bool;
}

impl<'a> Call<'a> {
    /// A decoder positioned at the procedure's arguments.
    pub fn args(&self) -> Decoder<'a> {
        Decoder::new(&self.record[self.header.args_at..])
    }

    /// An accepted reply header for this call.
    pub fn reply(&self, stat: Accept) -> Encoder {
        rpc::accepted(self.header.xid, stat)
    }
}

/// A reply: the encoded header and results, then optionally bulk data that goes out
/// as it is (XDR padding is added here). READ data is a list of slices of the ARC's
/// own buffers, so it reaches the socket in the reply's one `writev` uncopied.
#[derive(Debug, Default)]
pub struct Reply {
    pub head: Vec<u8>,
    pub data: Option<ReadBuf>,
}

impl Reply {
    pub fn new(head: Encoder) -> Reply {
        Reply {
            head: head.buf,
            data: None,
        }
    }

    pub fn len(&self) -> usize {
        let d = self.data.as_ref().map_or(0, |d| d.len());
        self.head.len() + d + Encoder::padding(d).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole reply as one buffer (for the duplicate-request cache).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = self.head.clone();
        if let Some(d) = &self.data {
            for part in d.slices() {
                v.extend_from_slice(part);
            }
            v.extend_from_slice(Encoder::padding(d.len()));
        }
        v
    }
}

/// A program (or several) served over RPC.
pub trait Service: Send + Sync + 'static {
    /// Answers one call whose RPC header is valid. `None`: send nothing (a
    /// retransmission of a call still running).
    fn call(&self, call: &Call<'_>) -> Option<Reply>;

    /// Answers a call on the connection's reader thread, when that takes no device I/O
    /// and no wait (a READ of cached data), exactly as `call` would; `None`, having done
    /// nothing, sends the call to a worker.
    fn call_cached(&self, _call: &Call<'_>) -> Option<Reply> {
        None
    }

    /// Whether a call may run on its connection's reader thread when it is that
    /// connection's only call (none in flight, no byte of another waiting to be read).
    /// That saves the hand-off to a worker and back, two thread switches a call and on
    /// a VM the larger part of a small call's cost, but the connection's next call is
    /// not read until it is done: only calls that never wait for the client (no call
    /// back on this connection) and take no long device work qualify.
    fn may_run_inline(&self, _call: &Call<'_>) -> bool {
        false
    }
}

/// A connection's calls queued or running, counted by its reader.
#[derive(Default)]
struct InFlight {
    calls: usize,
    reader_waits: bool,
}

struct Conn {
    peer: SocketAddr,
    writer: Mutex<TcpStream>,
    in_flight: Mutex<InFlight>,
    /// Signalled when a call ends while the reader waits for one to (`reader_waits`):
    /// std's condvar makes a futex call per notify even with nobody waiting.
    done: Condvar,
    closed: AtomicBool,
    /// Calls back to the client waiting for their replies, by xid.
    callbacks: Mutex<HashMap<u32, crossbeam_channel::Sender<Vec<u8>>>>,
    next_callback_xid: AtomicU32,
}

impl BackChannel for Conn {
    fn call(&self, call: &dyn Fn(u32) -> Vec<u8>, timeout: Duration) -> std::io::Result<Vec<u8>> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::NotConnected.into());
        }
        let xid = self.next_callback_xid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.callbacks.lock().unwrap().insert(xid, tx);
        self.send(&Reply {
            head: call(xid),
            data: None,
        });
        let answer = rx.recv_timeout(timeout);
        self.callbacks.lock().unwrap().remove(&xid);
        answer.map_err(|_| std::io::ErrorKind::TimedOut.into())
    }

    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }
}

impl Conn {
    /// Waits, as the connection's reader, until fewer than `limit` calls are in flight.
    fn wait_for_fewer_calls_than(&self, limit: usize) -> std::sync::MutexGuard<'_, InFlight> {
        let mut n = self.in_flight.lock().unwrap();
        while n.calls >= limit {
            n.reader_waits = true;
            n = self.done.wait(n).unwrap();
        }
        n.reader_waits = false;
        n
    }

    fn send(&self, reply: &Reply) {
        let total = reply.len();
        assert!(
            total < LAST_FRAGMENT as usize,
            "reply larger than one fragment"
        );
        let mark = (LAST_FRAGMENT | total as u32).to_be_bytes();
        let mut parts = vec![IoSlice::new(&mark), IoSlice::new(&reply.head)];
        if let Some(data) = &reply.data {
            parts.extend(data.slices().map(IoSlice::new));
            parts.push(IoSlice::new(Encoder::padding(data.len())));
        }
        let mut w = self.writer.lock().unwrap();
        if write_all_vectored(&mut w, &mut parts).is_err() {
            // The client went away; its reader sees the closed socket.
            self.closed.store(true, Ordering::SeqCst);
            let _ = w.shutdown(Shutdown::Both);
        }
    }

    /// Runs a counted call and sends its reply; the call is then no longer in flight.
    fn answer(&self, service: &dyn Service, call: &Call<'_>) {
        if let Some(reply) = service.call(call) {
            self.send(&reply);
        }
        let mut n = self.in_flight.lock().unwrap();
        n.calls -= 1;
        if n.reader_waits {
            self.done.notify_all();
        }
    }
}

/// Writes every byte of `parts`, as few system calls as the socket allows.
fn write_all_vectored(w: &mut TcpStream, parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    let mut rest = parts;
    IoSlice::advance_slices(&mut rest, 0); // drops leading empty slices
    while !rest.is_empty() {
        match w.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A call for a worker: its record and the header the reader decoded from it.
struct Job {
    conn: Arc<Conn>,
    record: Claimed,
    header: CallHeader,
    received: Ticks,
}

/// The request bytes of every connection together (see the module comment).
#[derive(Default)]
struct Budget {
    state: Mutex<BudgetState>,
    given_back: Condvar,
}

#[derive(Default)]
struct BudgetState {
    claimed: usize,
    /// Readers waiting for room: a claim given back wakes them only when there are
    /// some, so the common case costs no wake-up system call.
    waiting: usize,
}

impl Budget {
    fn claim(self: &Arc<Self>, bytes: usize) -> Claim {
        assert!(bytes <= MAX_RECORD_BYTES, "a claim is at most one record");
        let mut st = self.state.lock().unwrap();
        while st.claimed + bytes > MAX_BUFFERED_BYTES {
            st.waiting += 1;
            st = self.given_back.wait(st).unwrap();
            st.waiting -= 1;
        }
        st.claimed += bytes;
        Claim {
            budget: self.clone(),
            bytes,
        }
    }
}

/// Bytes taken from the budget, given back on drop.
struct Claim {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut st = self.budget.state.lock().unwrap();
        st.claimed -= self.bytes;
        if st.waiting > 0 {
            self.budget.given_back.notify_all();
        }
    }
}

/// The calls waiting for a worker (`vdev::work_queue`: an idle worker costs nothing,
/// and a call wakes exactly one worker, and only when one sleeps).
type JobQueue = WorkQueue<Job>;
type JobSender = QueueSender<Job>;

/// A record read under a claim that covers it.
struct Claimed {
    record: Vec<u8>,
    _claim: Option<Claim>,
}

/// A running RPC server; dropping it does not stop it, `stop` does.
pub struct RpcServer {
    addrs: Vec<SocketAddr>,
    stopping: Arc<AtomicBool>,
    acceptors: Vec<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    sender: Option<JobSender>,
    readers: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl RpcServer {
    /// Serves `service` on every listener with `workers` worker threads.
    pub fn start(
        listeners: Vec<TcpListener>,
        service: Arc<dyn Service>,
        workers: usize,
    ) -> std::io::Result<RpcServer> {
        let (tx, rx) = JobQueue::new(usize::MAX);
        let budget = Arc::new(Budget::default());
        let mut worker_threads = Vec::new();
        for i in 0..workers.max(1) {
            let rx = rx.clone();
            let service = service.clone();
            worker_threads.push(
                std::thread::Builder::new()
                    .name(format!("rpc-worker-{i}"))
                    .spawn(move || {
                        while let Some(job) = rx.pop() {
                            let call = Call {
                                peer: job.conn.peer,
                                received: job.received,
                                header: job.header,
                                record: &job.record.record,
                                back: Some(job.conn.clone() as Arc<dyn BackChannel>),
                            };
                            job.conn.answer(&*service, &call);
                        }
                    })?,
            );
        }
        let stopping = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::new(Mutex::new(Vec::new()));
        let readers: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let mut addrs = Vec::new();
        let mut acceptors = Vec::new();
        for listener in listeners {
            addrs.push(listener.local_addr()?);
            let stopping = stopping.clone();
            let conns = conns.clone();
            let readers = readers.clone();
            let tx = tx.clone();
            let budget = budget.clone();
            let service = service.clone();
            acceptors.push(
                std::thread::Builder::new()
                    .name("rpc-accept".into())
                    .spawn(move || {
                        accept_loop(listener, stopping, conns, readers, tx, budget, service)
                    })?,
            );
        }
        Ok(RpcServer {
            addrs,
            stopping,
            acceptors,
            workers: worker_threads,
            conns,
            sender: Some(tx),
            readers,
        })
    }

    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting and reading, lets every call already read finish and be
    /// answered, then returns.
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        for a in &self.addrs {
            // Wake the acceptor blocked in accept().
            let _ = TcpStream::connect(wake_addr(*a));
        }
        for h in self.acceptors.drain(..) {
            let _ = h.join();
        }
        for c in self.conns.lock().unwrap().iter() {
            // Stop reading new calls; replies can still be written.
            let _ = c.writer.lock().unwrap().shutdown(Shutdown::Read);
        }
        let readers: Vec<JoinHandle<()>> = std::mem::take(&mut *self.readers.lock().unwrap());
        for h in readers {
            let _ = h.join();
        }
        self.sender.take();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.writer.lock().unwrap().shutdown(Shutdown::Both);
        }
    }
}

fn wake_addr(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) if v4.ip().is_unspecified() => {
            SocketAddr::from(([127, 0, 0, 1], v4.port()))
        }
        SocketAddr::V6(v6) if v6.ip().is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v6.port()))
        }
        other => other,
    }
}

fn accept_loop(
    listener: TcpListener,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    readers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    tx: JobSender,
    budget: Arc<Budget>,
    service: Arc<dyn Service>,
) {
    let live = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        if live.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            tracing::warn!(%peer, "connection refused: {MAX_CONNECTIONS} connections open");
            continue;
        }
        let _ = stream.set_nodelay(true);
        // Idle connections wait for their next mark forever (see `read_record`).
        let _ = stream.set_read_timeout(Some(STALLED_RECORD));
        let Ok(writer) = stream.try_clone() else {
            continue;
        };
        let conn = Arc::new(Conn {
            peer,
            writer: Mutex::new(writer),
            in_flight: Mutex::new(InFlight::default()),
            done: Condvar::new(),
            closed: AtomicBool::new(false),
            callbacks: Mutex::new(HashMap::new()),
            // Apart from the client's own xids in its logs.
            next_callback_xid: AtomicU32::new(0x5ca1_0000),
        });
        {
            let mut all = conns.lock().unwrap();
            all.retain(|c| !c.closed.load(Ordering::SeqCst));
            all.push(conn.clone());
        }
        live.fetch_add(1, Ordering::SeqCst);
        let tx = tx.clone();
        let live = live.clone();
        let budget = budget.clone();
        let service = service.clone();
        let handle = std::thread::Builder::new()
            .name("rpc-conn".into())
            .spawn(move || {
                tracing::debug!(%peer, "connected");
                if let Err(e) = read_loop(stream, &conn, &tx, &budget, &*service) {
                    tracing::debug!(%peer, "connection closed: {e}");
                }
                // Replies to calls already read still go out; wait for them.
                drop(conn.wait_for_fewer_calls_than(1));
                // The write half is shared with `conns`: close the socket explicitly so
                // the client sees the end now, not when the server stops.
                let _ = conn.writer.lock().unwrap().shutdown(Shutdown::Both);
                conn.closed.store(true, Ordering::SeqCst);
                live.fetch_sub(1, Ordering::SeqCst);
            });
        if let Ok(h) = handle {
            let mut r = readers.lock().unwrap();
            r.retain(|h| !h.is_finished());
            r.push(h);
        }
    }
}

/// Why a connection's reader stopped.
#[derive(Debug)]
enum ReadEnd {
    Io(std::io::Error),
    TooLong(usize),
    Stalled,
}

impl std::fmt::Display for ReadEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadEnd::Io(e) => write!(f, "{e}"),
            ReadEnd::TooLong(n) => write!(f, "record of {n} bytes or more is over the limit"),
            ReadEnd::Stalled => write!(
                f,
                "a record's bytes stopped coming for {} s",
                STALLED_RECORD.as_secs()
            ),
        }
    }
}

fn read_loop(
    mut stream: TcpStream,
    conn: &Arc<Conn>,
    tx: &JobSender,
    budget: &Arc<Budget>,
    service: &dyn Service,
) -> Result<(), ReadEnd> {
    loop {
        let record = read_record(&mut stream, Some(budget))?;
        let received = Ticks::now();
        if let Some(xid) = reply_xid(&record.record) {
            // The client's answer to a call back: to whoever waits for it.
            if let Some(tx) = conn.callbacks.lock().unwrap().remove(&xid) {
                let _ = tx.send(record.record);
            }
            continue;
        }
        let header = match decode_record(&record.record) {
            Decoded::Call(header) => header,
            // RPC-level errors need no service: answered here.
            Decoded::Answered(reply) => {
                if let Some(reply) = reply {
                    conn.send(&reply);
                }
                continue;
            }
        };
        let call = Call {
            peer: conn.peer,
            received,
            header,
            record: &record.record,
            back: Some(conn.clone() as Arc<dyn BackChannel>),
        };
        if let Some(reply) = service.call_cached(&call) {
            conn.send(&reply);
            continue;
        }
        // Only this reader adds to `in_flight`, so a connection seen with nothing in
        // flight stays so until the call is counted below. The peek, a system call,
        // comes last: a pipelining client is told apart by the count alone.
        if service.may_run_inline(&call)
            && conn.in_flight.lock().unwrap().calls == 0
            && !more_waiting(&stream)
        {
            conn.in_flight.lock().unwrap().calls += 1;
            conn.answer(service, &call);
            continue;
        }
        let header = call.header;
        conn.wait_for_fewer_calls_than(MAX_IN_FLIGHT).calls += 1;
        tx.push(Job {
            conn: conn.clone(),
            record,
            header,
            received,
        });
    }
}

/// Whether the client has sent bytes not read yet (its next call on the way).
fn more_waiting(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: `byte` is a valid, writable one-byte buffer for the whole call and the
    // descriptor is the socket `stream` owns and keeps open for the call's duration;
    // MSG_PEEK leaves the byte in the socket and MSG_DONTWAIT returns at once, so
    // nothing the record reader expects is consumed and nothing blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// Reads one record (all its fragments) into one buffer, under a claim on `budget`
/// when there is one. A read timeout (the socket's, if set) while waiting for the
/// first byte of a record is no error: the connection is idle; anywhere else it is
/// `Stalled`.
fn read_record<R: Read>(stream: &mut R, budget: Option<&Arc<Budget>>) -> Result<Claimed, ReadEnd> {
    let mut record: Vec<u8> = Vec::new();
    let mut claim = None;
    loop {
        let mut mark = [0u8; 4];
        read_mark(stream, &mut mark, record.is_empty())?;
        let mark = u32::from_be_bytes(mark);
        let len = (mark & !LAST_FRAGMENT) as usize;
        let total = record.len() + len;
        if total > MAX_RECORD_BYTES {
            return Err(ReadEnd::TooLong(total));
        }
        if claim.is_none() {
            if let Some(b) = budget {
                // A record in several fragments may grow to the largest record.
                let whole = if mark & LAST_FRAGMENT != 0 {
                    len
                } else {
                    MAX_RECORD_BYTES
                };
                claim = Some(b.claim(whole));
            }
        }
        let start = record.len();
        record.resize(total, 0);
        stream
            .read_exact(&mut record[start..])
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ReadEnd::Stalled,
                _ => ReadEnd::Io(e),
            })?;
        if mark & LAST_FRAGMENT != 0 {
            return Ok(Claimed {
                record,
                _claim: claim,
            });
        }
    }
}

/// Reads a 4-byte record mark; an idle timeout before its first byte (`idle_ok`) only
/// means the client has nothing to say yet.
fn read_mark<R: Read>(stream: &mut R, mark: &mut [u8; 4], idle_ok: bool) -> Result<(), ReadEnd> {
    let mut got = 0;
    while got < 4 {
        match stream.read(&mut mark[got..]) {
            Ok(0) => return Err(ReadEnd::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if !(idle_ok && got == 0) {
                    return Err(ReadEnd::Stalled);
                }
            }
            Err(e) => return Err(ReadEnd::Io(e)),
        }
    }
    Ok(())
}

/// The xid of a record that is an RPC reply (the client answering a call back).
fn reply_xid(record: &[u8]) -> Option<u32> {
    let xid = u32::from_be_bytes(record.get(0..4)?.try_into().ok()?);
    let mtype = u32::from_be_bytes(record.get(4..8)?.try_into().ok()?);
    (mtype == rpc::MSG_REPLY).then_some(xid)
}

/// The RPC-level answer to a record (errors of the header itself, or the service's):
/// what the server sends back for one record (a whole RPC message, record marking
/// removed) from `peer`: `None` for records that get no reply (unreadable, not a call,
/// or a retransmission still running). The server's readers and workers take the same
/// two steps (`decode_record`, then the service); this is them in one function, the
/// entry point of the fuzz target.
pub fn answer_record(
    service: &dyn Service,
    peer: SocketAddr,
    record: &[u8],
    received: Ticks,
) -> Option<Reply> {
    match decode_record(record) {
        Decoded::Answered(reply) => reply,
        Decoded::Call(header) => service.call(&Call {
            peer,
            received,
            header,
            record,
            back: None,
        }),
    }
}

/// What the RPC layer makes of a record before any service sees it.
enum Decoded {
    /// A call for a service.
    Call(CallHeader),
    /// Answered at the RPC level (a bad credential, a wrong RPC version, a flavor not
    /// accepted), or `None`: no reply at all (unreadable, or not a call).
    Answered(Option<Reply>),
}

fn decode_record(record: &[u8]) -> Decoded {
    let header = match rpc::decode_call(record) {
        Ok(h) => h,
        Err(HeaderError::Unreadable(_)) | Err(HeaderError::NotACall { .. }) => {
            return Decoded::Answered(None)
        }
        Err(HeaderError::BadCredential { xid }) => {
            return Decoded::Answered(Some(Reply::new(rpc::auth_error(xid, AuthStat::BadCred))))
        }
    };
    if header.rpc_version != rpc::RPC_VERSION {
        return Decoded::Answered(Some(Reply::new(rpc::rpc_mismatch(header.xid))));
    }
    if let rpc::Credential::Other(_) = header.credential {
        return Decoded::Answered(Some(Reply::new(rpc::auth_error(
            header.xid,
            AuthStat::TooWeak,
        ))));
    }
    Decoded::Call(header)
}

/// A minimal blocking RPC client over TCP (tests, the portmapper probe, tools).
pub struct RpcClient {
    stream: TcpStream,
    next_xid: u32,
}

impl RpcClient {
    pub fn connect(addr: SocketAddr) -> std::io::Result<RpcClient> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(RpcClient {
            stream,
            next_xid: 1,
        })
    }

    /// From a given local socket (e.g. one bound to a privileged port).
    pub fn from_stream(stream: TcpStream) -> RpcClient {
        RpcClient {
            stream,
            next_xid: 1,
        }
    }

    /// Sends one call and returns the whole reply record.
    pub fn call(
        &mut self,
        program: u32,
        version: u32,
        procedure: u32,
        cred: &rpc::Credential,
        args: &[u8],
    ) -> std::io::Result<Vec<u8>> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let mut e = rpc::encode_call(xid, program, version, procedure, cred);
        e.buf.extend_from_slice(args);
        self.send_raw(&e.buf)?;
        loop {
            let reply = self.read_reply()?;
            if reply.len() >= 4 && reply[0..4] == xid.to_be_bytes() {
                return Ok(reply);
            }
        }
    }

    /// Sends `body` as one record.
    pub fn send_raw(&mut self, body: &[u8]) -> std::io::Result<()> {
        let mark = (LAST_FRAGMENT | body.len() as u32).to_be_bytes();
        self.stream.write_all(&mark)?;
        self.stream.write_all(body)
    }

    /// Writes bytes as they are (for tests of malformed framing).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn read_reply(&mut self) -> std::io::Result<Vec<u8>> {
        read_reply_record(&mut self.stream)
    }
}

/// Reads one whole record (a reply, for clients) from `r`, fragments joined.
pub fn read_reply_record<R: Read>(r: &mut R) -> std::io::Result<Vec<u8>> {
    match read_record(r, None) {
        Ok(c) => Ok(c.record),
        Err(ReadEnd::Io(e)) => Err(e),
        Err(ReadEnd::TooLong(n)) => Err(std::io::Error::other(format!(
            "reply of {n} bytes is too long"
        ))),
        Err(ReadEnd::Stalled) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every call with an empty success, noting the thread it ran on by the
    /// call's procedure number; `may_run_inline` for every call.
    struct ThreadNoting {
        ran_on: Mutex<HashMap<u32, String>>,
    }

    impl Service for ThreadNoting {
        fn call(&self, call: &Call<'_>) -> Option<Reply> {
            let name = std::thread::current().name().unwrap_or("").to_string();
            self.ran_on
                .lock()
                .unwrap()
                .insert(call.header.procedure, name);
            Some(Reply::new(call.reply(Accept::Success)))
        }

        fn may_run_inline(&self, _call: &Call<'_>) -> bool {
            true
        }
    }

    #[test]
    fn a_lone_call_runs_on_the_reader_and_pipelined_calls_on_workers() {
        let service = Arc::new(ThreadNoting {
            ran_on: Mutex::new(HashMap::new()),
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = RpcServer::start(vec![listener], service.clone(), 2).unwrap();
        let mut c = RpcClient::connect(server.local_addrs()[0]).unwrap();
        // One call, its reply awaited: nothing else in flight or sent.
        c.call(7, 1, 1, &rpc::Credential::None, &[]).unwrap();
        // Two calls in one send: the first is read with the second waiting behind it.
        let mut both = Vec::new();
        for (xid, procedure) in [(10u32, 2u32), (11, 3)] {
            let body = rpc::encode_call(xid, 7, 1, procedure, &rpc::Credential::None).buf;
            both.extend_from_slice(&(LAST_FRAGMENT | body.len() as u32).to_be_bytes());
            both.extend_from_slice(&body);
        }
        c.stream().write_all(&both).unwrap();
        c.read_reply().unwrap();
        c.read_reply().unwrap();
        let ran_on = service.ran_on.lock().unwrap().clone();
        assert_eq!(ran_on[&1], "rpc-conn", "{ran_on:?}");
        assert!(ran_on[&2].starts_with("rpc-worker"), "{ran_on:?}");
        server.stop();
    }
}
