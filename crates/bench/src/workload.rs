//! The workloads, run by one client: preparing its share of the file set, getting
//! its threads connected and waiting, and running them from the common start.
//!
//! Each thread has its own connection and its own `Recorder`. Streaming and random
//! workloads keep up to `depth` calls in flight per thread (a latency is the time from
//! sending a call to taking its reply, taken in order, so a call that finished behind
//! a slower one counts until that one is taken). The Filebench-like personalities
//! issue one call at a time per thread, as Filebench's threads do.
//!
//! A thread stops at its deadline, when its byte budget is spent, when a streaming
//! run without either has made one pass over its share, when the client is told to
//! stop, or at its first error (counted and kept as a sample: a load generator that
//! keeps going on a dead connection would only measure its own error path).

use crate::client::{mkdir_path, mount, root_credential, Call, Fh, Nfs, Stable, Target};
use crate::data::{Content, Rng};
use crate::job::{Job, Workload};
use crate::stats::{ClientResult, Live, Op, Recorder};
use anyhow::{anyhow, bail, ensure, Context, Result};
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn set_file_name(i: u64) -> String {
    format!("f{i}")
}

fn credential(client: usize) -> nfs::rpc::Credential {
    root_credential(&format!("shoal-bench-{client}"))
}

/// Writes file `f` of the set whole (UNSTABLE, `depth` in flight, then COMMIT).
fn fill_file(nfs: &Nfs, job: &Job, content: &Content, fh: &Fh, f: u64) -> Result<()> {
    let mut window: VecDeque<(Call, usize)> = VecDeque::new();
    let mut off = 0u64;
    while off < job.file_size || !window.is_empty() {
        while off < job.file_size && window.len() < job.depth.max(4) {
            let len = job.wsize.min(job.file_size - off) as usize;
            let call = nfs.start_write(fh, off, content.slice(f, off, len), Stable::Unstable)?;
            window.push_back((call, len));
            off += len as u64;
        }
        if let Some((call, len)) = window.pop_front() {
            Nfs::finish_write(call.wait()?, len, Stable::Unstable)?;
        }
    }
    nfs.commit(fh)
}

/// Reads file `f` of the set whole, `depth` in flight, checking its size (and its
/// bytes when `verify`).
fn read_file_whole(nfs: &Nfs, job: &Job, content: &Content, fh: &Fh, f: u64) -> Result<u64> {
    let mut window: VecDeque<(Call, u64, usize)> = VecDeque::new();
    let mut off = 0u64;
    while off < job.file_size || !window.is_empty() {
        while off < job.file_size && window.len() < job.depth.max(4) {
            let len = job.rsize.min(job.file_size - off) as usize;
            window.push_back((nfs.start_read(fh, off, len as u32)?, off, len));
            off += len as u64;
        }
        if let Some((call, at, len)) = window.pop_front() {
            let r = Nfs::finish_read(call.wait()?)?;
            check_read(job, content, f, at, len, r.bytes())?;
        }
    }
    Ok(job.file_size)
}

fn check_read(
    job: &Job,
    content: &Content,
    f: u64,
    off: u64,
    len: usize,
    got: &[u8],
) -> Result<()> {
    if got.len() != len {
        bail!(
            "short read of f{f} at {off}: {} of {len} bytes (is the file set complete? run again to re-prepare it)",
            got.len()
        );
    }
    if job.verify {
        if let Some(at) = content.mismatch(f, off, got) {
            bail!("f{f} holds other bytes than were written, from offset {at}");
        }
    }
    Ok(())
}

/// Prepares client `client`'s share of the file set (files `client`, `client +
/// clients`, ...): makes the directories, writes the files that are missing or of
/// the wrong size (only when the workload reads them; a write workload gets empty
/// files), and reads the share once when the job asks for a warm cache.
pub fn prepare(
    job: &Job,
    target: &Target,
    client: usize,
    clients: usize,
    done: &AtomicU64,
) -> Result<()> {
    let root = mount(target, &job.export_for(client), credential(client))?;
    let nfs = Nfs::connect(target, credential(client))?;
    mkdir_path(&nfs, &root, &format!("{}/work", job.dir))?;
    if !job.workload.has_file_set() {
        return Ok(());
    }
    let set = mkdir_path(&nfs, &root, &job.set_dir())?;
    // A client with its own export prepares its whole set; clients sharing one
    // prepare a share each.
    let mine: Vec<u64> = if job.per_client_export() {
        (0..job.files).collect()
    } else {
        (client as u64..job.files).step_by(clients).collect()
    };
    let content = Content::new(job.seed, job.compressible);
    let workers = job.threads.min(mine.len()).max(1);
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (mine, set, content) = (&mine, &set, &content);
                s.spawn(move || -> Result<()> {
                    let nfs = Nfs::connect(target, credential(client))?;
                    for &f in mine.iter().skip(w).step_by(workers) {
                        let name = set_file_name(f);
                        let existing = nfs.lookup(set, &name)?;
                        let fh = match existing {
                            Some((fh, Some(a)))
                                if job.workload != Workload::Write && a.size == job.file_size =>
                            {
                                fh
                            }
                            _ if job.workload == Workload::Write => nfs.create(set, &name, true)?,
                            _ => {
                                let fh = nfs.create(set, &name, true)?;
                                fill_file(&nfs, job, content, &fh, f)
                                    .with_context(|| format!("writing {}/{name}", job.set_dir()))?;
                                fh
                            }
                        };
                        if job.warmup && job.workload.reads_the_set() {
                            read_file_whole(&nfs, job, content, &fh, f)?;
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("a prepare thread panicked"))??;
        }
        Ok(())
    })
}

/// The figures and end of one thread.
struct ThreadOutcome {
    recorder: Recorder,
    done: Instant,
    error: Option<String>,
}

/// A client whose threads are connected and waiting for the start.
pub struct ReadyClient {
    name: String,
    source: Option<String>,
    threads: Vec<(Sender<Instant>, JoinHandle<ThreadOutcome>)>,
    pub live: Arc<Live>,
    stop: Arc<AtomicBool>,
}

struct ClientShared {
    job: Job,
    content: Content,
    set: Vec<Fh>,
    client: usize,
    clients: usize,
}

/// Mounts, finds every file of the set, and connects `threads` threads (each with its
/// own directory under `<dir>/work/`), which then wait for `start`.
pub fn ready(
    job: &Job,
    target: &Target,
    client: usize,
    clients: usize,
    name: String,
) -> Result<ReadyClient> {
    let cred = credential(client);
    let root = mount(target, &job.export_for(client), cred.clone())?;
    let nfs = Nfs::connect(target, cred.clone())?;
    let mut set = Vec::new();
    if job.workload.has_file_set() {
        let dir = mkdir_path(&nfs, &root, &job.set_dir())?;
        for f in 0..job.files {
            let (fh, attr) = nfs.lookup(&dir, &set_file_name(f))?.ok_or_else(|| {
                anyhow!(
                    "{}/f{f} is missing: the file set was not prepared",
                    job.set_dir()
                )
            })?;
            if job.workload.reads_the_set() && attr.is_some_and(|a| a.size != job.file_size) {
                bail!(
                    "{}/f{f} is not {} bytes: the file set was not prepared",
                    job.set_dir(),
                    job.file_size
                );
            }
            set.push(fh);
        }
    }
    let shared = Arc::new(ClientShared {
        job: job.clone(),
        content: Content::new(job.seed, job.compressible),
        set,
        client,
        clients,
    });
    let live = Arc::new(Live::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..job.threads {
        let conn = Nfs::connect(target, cred.clone())?;
        let own = mkdir_path(&conn, &root, &format!("{}/work/c{client}-t{t}", job.dir))?;
        let (tx, rx) = channel();
        let (shared, live, stop) = (shared.clone(), live.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name(format!("bench-c{client}-t{t}"))
            .spawn(move || run_thread(conn, own, shared, t, rx, live, stop))?;
        threads.push((tx, handle));
    }
    Ok(ReadyClient {
        name,
        source: target.bind.map(|ip| ip.to_string()),
        threads,
        live,
        stop,
    })
}

impl ReadyClient {
    /// Starts every thread at `at`.
    pub fn start(&self, at: Instant) {
        for (tx, _) in &self.threads {
            let _ = tx.send(at);
        }
    }

    /// Asks the threads to stop early (the run was interrupted).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits for every thread and folds their figures into the client's.
    pub fn finish(self, started: Instant) -> ClientResult {
        let mut recorders = Vec::new();
        let mut errors = Vec::new();
        let mut last = started;
        for (_, h) in self.threads {
            match h.join() {
                Ok(o) => {
                    last = last.max(o.done);
                    if let Some(e) = o.error {
                        errors.push(e);
                    }
                    recorders.push(o.recorder);
                }
                Err(_) => errors.push("a worker thread panicked".into()),
            }
        }
        let done_s = last.saturating_duration_since(started).as_secs_f64();
        errors.truncate(8);
        ClientResult::from_threads(self.name, self.source, recorders, done_s, errors)
    }
}

fn run_thread(
    nfs: Nfs,
    own: Fh,
    shared: Arc<ClientShared>,
    thread: usize,
    start: Receiver<Instant>,
    live: Arc<Live>,
    stop: Arc<AtomicBool>,
) -> ThreadOutcome {
    let Ok(at) = start.recv() else {
        return ThreadOutcome {
            recorder: Recorder::new(Instant::now(), live),
            done: Instant::now(),
            error: None,
        };
    };
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
    let job = &shared.job;
    // Streams share the one file set; with an export per client, a client's threads
    // share its own set.
    let (streams, stream) = if job.per_client_export() {
        (job.threads, thread)
    } else {
        (
            shared.clients * job.threads,
            shared.client * job.threads + thread,
        )
    };
    let mut w = Worker {
        nfs,
        own,
        sh: &shared,
        rec: Recorder::new(at, live.clone()),
        // Seeded by the stream's number over every client, so no two streams repeat
        // each other's offsets.
        rng: Rng::new(
            job.seed ^ (((shared.client * job.threads + thread) as u64 + 1) * 0x9E37_79B9),
        ),
        deadline: job.duration_s.map(|d| at + Duration::from_secs_f64(d)),
        budget: job.bytes_per_client.map(|b| b / job.threads as u64),
        stop: &stop,
        thread,
        stream,
        streams,
    };
    let result = w.run();
    let error = result.err().map(|e| {
        w.rec.error();
        format!("thread {thread}: {e:#}")
    });
    ThreadOutcome {
        recorder: w.rec,
        done: Instant::now(),
        error,
    }
}

struct Worker<'a> {
    nfs: Nfs,
    own: Fh,
    sh: &'a ClientShared,
    rec: Recorder,
    rng: Rng,
    deadline: Option<Instant>,
    budget: Option<u64>,
    stop: &'a AtomicBool,
    thread: usize,
    stream: usize,
    streams: usize,
}

/// One READ or WRITE of set file `f` in flight (`write` says how stable).
struct InFlight {
    call: Call,
    sent: Instant,
    f: u64,
    off: u64,
    len: usize,
    write: Option<Stable>,
}

impl<'a> Worker<'a> {
    /// The job, borrowed from the client's shared state, not from `self` (so the
    /// worker's other fields stay free to change while it is held).
    fn job(&self) -> &'a Job {
        &self.sh.job
    }

    /// Sends a READ (or, with `write`, a WRITE of the set's content) of set file `f`.
    fn start_io(&self, f: u64, off: u64, len: usize, write: Option<Stable>) -> Result<InFlight> {
        let sh = self.sh;
        let fh = &sh.set[f as usize];
        let call = match write {
            Some(stable) => self
                .nfs
                .start_write(fh, off, sh.content.slice(f, off, len), stable)?,
            None => self.nfs.start_read(fh, off, len as u32)?,
        };
        Ok(InFlight {
            call,
            sent: Instant::now(),
            f,
            off,
            len,
            write,
        })
    }

    /// Takes the reply of `io`, checks it (a READ's bytes too, with `verify`), and
    /// records it.
    fn finish_io(&mut self, io: InFlight) -> Result<()> {
        let reply = io.call.wait()?;
        match io.write {
            Some(stable) => {
                Nfs::finish_write(reply, io.len, stable)?;
                self.rec.record(Op::Write, io.len as u64, io.sent);
            }
            None => {
                let r = Nfs::finish_read(reply)?;
                check_read(
                    self.job(),
                    &self.sh.content,
                    io.f,
                    io.off,
                    io.len,
                    r.bytes(),
                )?;
                self.rec.record(Op::Read, io.len as u64, io.sent);
            }
        }
        Ok(())
    }

    /// Whether to issue another operation.
    fn go(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
            && self.deadline.is_none_or(|d| Instant::now() < d)
            && self.budget.is_none_or(|b| b > 0)
    }

    fn spend(&mut self, bytes: u64) {
        if let Some(b) = &mut self.budget {
            *b = b.saturating_sub(bytes);
        }
    }

    fn run(&mut self) -> Result<()> {
        match self.job().workload {
            Workload::Read => self.streaming(false),
            Workload::Write => self.streaming(true),
            Workload::Randread => self.random(false),
            Workload::Randwrite => self.random(true),
            Workload::Metadata => self.metadata(),
            Workload::Smallfiles => self.smallfiles(),
            Workload::Fileserver => self.fileserver(),
            Workload::Varmail => self.varmail(),
            Workload::Webserver => self.webserver(),
            Workload::Videoserver => self.videoserver(),
            Workload::Oltp => self.oltp(),
        }
    }

    /// One call, timed and recorded.
    fn timed<T>(&mut self, op: Op, bytes: u64, f: impl FnOnce(&Nfs) -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let v = f(&self.nfs)?;
        self.rec.record(op, bytes, t);
        self.spend(bytes);
        Ok(v)
    }

    /// This stream's share of the file set, in bytes of the set laid end to end,
    /// cut at `io_size` units.
    fn share(&self) -> (u64, u64) {
        let job = self.job();
        let units = job.set_bytes().div_ceil(job.io_size);
        let at =
            |s: usize| (units * s as u64 / self.streams as u64 * job.io_size).min(job.set_bytes());
        (at(self.stream), at(self.stream + 1))
    }

    /// Streaming read or write of this stream's share, `depth` calls in flight. Without
    /// a duration or byte budget, one pass; with one, passes repeat.
    fn streaming(&mut self, write: bool) -> Result<()> {
        let job = self.job();
        let (lo, hi) = self.share();
        if lo == hi {
            return Ok(());
        }
        let repeat = self.deadline.is_some() || self.budget.is_some();
        let mut pos = lo;
        let mut window: VecDeque<InFlight> = VecDeque::new();
        let mut touched = BTreeSet::new();
        let stable = write.then_some(Stable::Unstable);
        loop {
            while window.len() < job.depth && self.go() {
                if pos >= hi {
                    if !repeat {
                        break;
                    }
                    pos = lo;
                }
                let (f, off) = (pos / job.file_size, pos % job.file_size);
                let len = job.io_size.min(job.file_size - off).min(hi - pos) as usize;
                if write {
                    touched.insert(f);
                }
                window.push_back(self.start_io(f, off, len, stable)?);
                pos += len as u64;
                self.spend(len as u64);
            }
            let Some(io) = window.pop_front() else {
                break;
            };
            self.finish_io(io)?;
        }
        let sh = self.sh;
        for f in touched {
            self.timed(Op::Commit, 0, |n| n.commit(&sh.set[f as usize]))?;
        }
        Ok(())
    }

    /// Random `io_size` reads, or FILE_SYNC writes, anywhere in the set.
    fn random(&mut self, write: bool) -> Result<()> {
        let job = self.job();
        let slots = (job.file_size / job.io_size).max(1);
        let stable = write.then_some(Stable::FileSync);
        let mut window: VecDeque<InFlight> = VecDeque::new();
        loop {
            while window.len() < job.depth && self.go() {
                let f = self.rng.below(job.files);
                let off = self.rng.below(slots) * job.io_size;
                window.push_back(self.start_io(f, off, job.io_size as usize, stable)?);
            }
            let Some(io) = window.pop_front() else {
                break;
            };
            self.finish_io(io)?;
        }
        Ok(())
    }

    fn metadata(&mut self) -> Result<()> {
        let own = self.own.clone();
        let mut n = 0u64;
        while self.go() {
            let name = format!("m{n}");
            n += 1;
            let fh = self.timed(Op::Create, 0, |nfs| nfs.create(&own, &name, true))?;
            self.timed(Op::Getattr, 0, |nfs| nfs.getattr(&fh))?;
            self.timed(Op::Remove, 0, |nfs| nfs.remove(&own, &name))?;
        }
        Ok(())
    }

    /// Small files through their life (see `Workload::Smallfiles`): each step one
    /// timed operation, so both protocols count four a file. Under a write delegation
    /// (`--delegations`, NFSv4.1) this client has the file's attributes and data
    /// (it wrote them), so the stat and the open-read-close are answered here, as a
    /// kernel client answers them, and recorded as `getattr_delegated` and
    /// `read_delegated`; a delegation the server recalled is given back first and the
    /// steps go to the server.
    fn smallfiles(&mut self) -> Result<()> {
        let own = self.own.clone();
        let size = self.job().io_size as usize;
        // Own files take the content of an imaginary set file past the set's end.
        let key = self.sh.job.files + self.stream as u64;
        let data = self.sh.content.slice(key, 0, size);
        let mut n = 0u64;
        while self.go() {
            let name = format!("s{n}");
            n += 1;
            let (fh, mut deleg) = self.timed(Op::Create, size as u64, |nfs| {
                nfs.create_with_data(&own, &name, data)
            })?;
            if let Some(d) = deleg.filter(|_| self.nfs.conn.recalled(&fh.0)) {
                self.nfs.delegreturn(&fh, &d)?;
                deleg = None;
            }
            if deleg.is_some() {
                // What the client holds: the size it wrote, and the bytes.
                self.timed(Op::GetattrDelegated, 0, |_| Ok(data.len()))?;
                self.timed(Op::ReadDelegated, 0, |_| {
                    ensure!(data.len() == size, "{name}: holds {} bytes", data.len());
                    Ok(())
                })?;
            } else {
                self.timed(Op::Getattr, 0, |nfs| nfs.getattr(&fh))?;
                self.timed(Op::Read, size as u64, |nfs| {
                    let got = nfs.open_read_close(&own, &name, &fh, size as u32)?;
                    ensure!(got == size, "{name}: read {got} of its {size} bytes");
                    Ok(())
                })?;
            }
            self.timed(Op::Remove, 0, |nfs| match &deleg {
                Some(d) => nfs.remove_delegated(&own, &name, &fh, d),
                None => nfs.remove(&own, &name),
            })?;
        }
        Ok(())
    }

    /// Reads set file `f` whole, one call at a time.
    fn read_whole(&mut self, f: u64) -> Result<()> {
        let job = self.job();
        let mut off = 0;
        while off < job.file_size {
            let len = job.rsize.min(job.file_size - off) as usize;
            let io = self.start_io(f, off, len, None)?;
            self.finish_io(io)?;
            self.spend(len as u64);
            off += len as u64;
        }
        Ok(())
    }

    /// Writes `len` bytes at `off` of a file of the thread's own, in `wsize` calls.
    fn write_own(&mut self, fh: &Fh, off: u64, len: u64, stable: Stable) -> Result<()> {
        let wsize = self.job().wsize;
        let mut at = off;
        while at < off + len {
            let n = wsize.min(off + len - at) as usize;
            // Own files take the content of an imaginary set file past the set's end.
            let key = self.sh.job.files + self.stream as u64;
            let data = self.sh.content.slice(key, at, n);
            self.timed(Op::Write, n as u64, |nfs| nfs.write(fh, at, data, stable))?;
            at += n as u64;
        }
        Ok(())
    }

    fn random_set_file(&mut self) -> u64 {
        self.rng.below(self.job().files)
    }

    /// Filebench fileserver, approximately: create a file of the set's file size in the
    /// thread's own directory and write it whole, append 16 KiB, read a set file whole,
    /// delete the new file, stat a set file.
    fn fileserver(&mut self) -> Result<()> {
        let own = self.own.clone();
        let size = self.job().file_size;
        let mut n = 0u64;
        while self.go() {
            let name = format!("fs{n}");
            n += 1;
            let fh = self.timed(Op::Create, 0, |nfs| nfs.create(&own, &name, true))?;
            self.write_own(&fh, 0, size, Stable::Unstable)?;
            self.write_own(&fh, size, 16 << 10, Stable::Unstable)?;
            let f = self.random_set_file();
            self.read_whole(f)?;
            self.timed(Op::Remove, 0, |nfs| nfs.remove(&own, &name))?;
            let f = self.random_set_file();
            let sh = self.sh;
            self.timed(Op::Getattr, 0, |nfs| nfs.getattr(&sh.set[f as usize]))?;
        }
        Ok(())
    }

    /// Filebench varmail, approximately: delete the thread's mail file, create it and
    /// append 16 KiB then COMMIT (fsync), read a set file whole, append 16 KiB to the
    /// own file then COMMIT, read another set file whole.
    fn varmail(&mut self) -> Result<()> {
        let own = self.own.clone();
        while self.go() {
            self.timed(Op::Remove, 0, |nfs| nfs.remove(&own, "mail"))?;
            let fh = self.timed(Op::Create, 0, |nfs| nfs.create(&own, "mail", true))?;
            self.write_own(&fh, 0, 16 << 10, Stable::Unstable)?;
            self.timed(Op::Commit, 0, |nfs| nfs.commit(&fh))?;
            let f = self.random_set_file();
            self.read_whole(f)?;
            self.write_own(&fh, 16 << 10, 16 << 10, Stable::Unstable)?;
            self.timed(Op::Commit, 0, |nfs| nfs.commit(&fh))?;
            let f = self.random_set_file();
            self.read_whole(f)?;
        }
        Ok(())
    }

    /// Filebench webserver, approximately: read ten set files whole, append 16 KiB to
    /// the thread's own log (which starts over at 16 MiB).
    fn webserver(&mut self) -> Result<()> {
        let own = self.own.clone();
        let log = self.timed(Op::Create, 0, |nfs| nfs.create(&own, "log", true))?;
        let mut at = 0u64;
        while self.go() {
            for _ in 0..10 {
                let f = self.random_set_file();
                self.read_whole(f)?;
            }
            self.write_own(&log, at, 16 << 10, Stable::Unstable)?;
            at = (at + (16 << 10)) % (16 << 20);
        }
        Ok(())
    }

    /// Filebench videoserver, approximately: thread 0 of each client (when it has more
    /// than one) writes new videos of the set's file size into its own directory, one
    /// after another; the others stream whole set files, `depth` reads in flight.
    fn videoserver(&mut self) -> Result<()> {
        let job = self.job();
        if self.thread == 0 && job.threads > 1 {
            let own = self.own.clone();
            let mut n = 0u64;
            while self.go() {
                let name = format!("video{}", n % 2);
                n += 1;
                let fh = self.timed(Op::Create, 0, |nfs| nfs.create(&own, &name, true))?;
                let mut off = 0;
                while off < job.file_size && self.go() {
                    let len = job.io_size.min(job.file_size - off);
                    self.write_own(&fh, off, len, Stable::Unstable)?;
                    off += len;
                }
                self.timed(Op::Commit, 0, |nfs| nfs.commit(&fh))?;
            }
            return Ok(());
        }
        while self.go() {
            let f = self.random_set_file();
            let mut window: VecDeque<InFlight> = VecDeque::new();
            let mut off = 0u64;
            loop {
                while off < job.file_size && window.len() < job.depth && self.go() {
                    let len = job.io_size.min(job.file_size - off) as usize;
                    window.push_back(self.start_io(f, off, len, None)?);
                    off += len as u64;
                }
                let Some(io) = window.pop_front() else {
                    break;
                };
                self.finish_io(io)?;
            }
        }
        Ok(())
    }

    /// Filebench oltp, approximately: with three or more threads, thread 0 is the log
    /// writer (64 KiB FILE_SYNC appends to its own log, starting over at 64 MiB), one
    /// thread in ten (at least one) writes `io_size` FILE_SYNC at random in the set,
    /// and the rest read `io_size` at random, `depth` in flight. With fewer threads,
    /// thread 0 reads and thread 1 writes.
    fn oltp(&mut self) -> Result<()> {
        let threads = self.job().threads;
        let writers = (threads / 10).max(1);
        let role = if threads >= 3 {
            match self.thread {
                0 => 0,
                t if t <= writers => 1,
                _ => 2,
            }
        } else if self.thread == 0 {
            2
        } else {
            1
        };
        match role {
            0 => {
                let own = self.own.clone();
                let log = self.timed(Op::Create, 0, |nfs| nfs.create(&own, "log", true))?;
                let mut at = 0u64;
                while self.go() {
                    self.write_own(&log, at, 64 << 10, Stable::FileSync)?;
                    at = (at + (64 << 10)) % (64 << 20);
                }
                Ok(())
            }
            1 => self.random(true),
            _ => self.random(false),
        }
    }
}
