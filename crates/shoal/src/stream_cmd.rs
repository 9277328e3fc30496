//! `shoal send` and `shoal receive`: a snapshot as a stream on standard output, and a
//! stream from standard input into a filesystem, so `shoal send tank/home@mon | ssh
//! other shoal receive tank/home` copies a filesystem to another appliance. Through
//! the daemon when it runs (`/api/v1/send`, `/api/v1/receive`), else on the pool
//! directly under its lock. The stream format is in `docs/format.md`.
//!
//! Both ends widen the pipe they write to or read from (`widen_pipe`): with the
//! kernel's 64 KiB pipe, `send | receive` woke the other side for every 64 KiB and
//! spent a third of its CPU in wake-ups and idle waits (2 GiB on memory-backed
//! devices: 4.6-5.3 s and 6.1-7.1 CPU-seconds with 64 KiB, 3.3 s and 5.2 with 1 MiB).

use crate::admin::{encode, with_datasets, with_datasets_syncing, Admin};
use crate::units::human;
use anyhow::{bail, Context, Result};
use pool::send::receiver::ReceiveSummary;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

/// Counts the bytes that pass.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        let n = self.inner.write_vectored(bufs)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The pipe size both ends ask for: a whole write of `HashingWriter` (1 MiB), so the
/// sender wakes the receiver once per write, not once per 64 KiB.
const PIPE_BYTES: usize = 1 << 20;

/// Asks the kernel for a `PIPE_BYTES` pipe when `fd` is one; anything else (a file, a
/// socket, a refusal over `/proc/sys/fs/pipe-max-size` for an unprivileged user)
/// keeps what it has, which only costs speed.
fn widen_pipe(fd: &impl AsRawFd) {
    // SAFETY: fcntl(F_SETPIPE_SZ) takes an integer descriptor, borrowed here from a
    // live standard stream, and an integer size; it touches no memory of ours. On a
    // descriptor that is not a pipe it fails with EBADF and changes nothing.
    let _ = unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            PIPE_BYTES as libc::c_int,
        )
    };
}

/// Standard output for a stream, refusing a terminal: its descriptor as a plain file,
/// unbuffered. The stream writer buffers record heads itself and writes big payloads
/// from the blocks' own buffers; a `BufWriter` would copy those again, and std's
/// line-buffered stdout splits every write at its last newline byte.
fn stream_out() -> Result<Counting<std::fs::File>> {
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        bail!("the stream is binary: send it into a pipe or a file, not a terminal");
    }
    widen_pipe(&stdout);
    Ok(Counting {
        inner: duplicate(&stdout, "standard output")?,
        bytes: 0,
    })
}

/// A standard stream's descriptor, duplicated, as a plain file: unbuffered, unlocked.
fn duplicate(stream: &impl AsFd, what: &str) -> Result<std::fs::File> {
    let fd = stream
        .as_fd()
        .try_clone_to_owned()
        .with_context(|| format!("duplicating {what}"))?;
    Ok(std::fs::File::from(fd))
}

/// `get_to` of a stream from the daemon into `out`, buffered: the HTTP body arrives
/// in small pieces.
fn stream_from_daemon(api: &crate::admin::Api, path: &str, out: &mut impl Write) -> Result<()> {
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, out);
    api.get_to(path, &mut buffered)?;
    buffered.flush()?;
    Ok(())
}

/// `shoal send --resume TOKEN FS`: the rest of a cut stream of a snapshot of `fs`'s
/// pool, from the point the token names.
pub fn send_resumed(filesystem: &str, token: &str) -> Result<()> {
    let point = server::receive_tokens::parse_token(token)?;
    let started = Instant::now();
    let mut out = stream_out()?;
    match Admin::connect()? {
        Admin::Daemon(api) => {
            let path = format!(
                "/send-resume/{}?token={}",
                encode(filesystem),
                encode(token)
            );
            stream_from_daemon(&api, &path, &mut out)?;
        }
        Admin::Local => {
            with_datasets(filesystem, |ds| {
                let (to, from) = server::receive_tokens::resumed_ids(ds, &point)?;
                pool::send::writer::send_from(ds.pool(), to, from, Some(point.at), &mut out)?;
                Ok(())
            })?;
        }
    }
    out.flush()?;
    eprintln!(
        "sent the rest of a stream of {filesystem}: {} in {:.1} s",
        human(out.bytes),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn send(snapshot: &str, from: Option<&str>, replicate: bool) -> Result<()> {
    if !snapshot.contains('@') {
        bail!("'{snapshot}' is not a snapshot: name one as pool/fs@name");
    }
    let started = Instant::now();
    let mut out = stream_out()?;
    match Admin::connect()? {
        Admin::Daemon(api) => {
            let mut query = Vec::new();
            if let Some(f) = from {
                query.push(format!("from={}", encode(f)));
            }
            if replicate {
                query.push("replicate=true".to_string());
            }
            let mut path = format!("/send/{}", encode(snapshot));
            if !query.is_empty() {
                path.push_str(&format!("?{}", query.join("&")));
            }
            stream_from_daemon(&api, &path, &mut out)?;
        }
        Admin::Local if replicate => {
            with_datasets(snapshot, |ds| {
                Ok(ds.send_replicated(snapshot, from, &mut out).map(|_| ())?)
            })?;
        }
        Admin::Local => {
            with_datasets(snapshot, |ds| Ok(ds.send(snapshot, from, &mut out)?))?;
        }
    }
    out.flush()?;
    eprintln!(
        "sent {snapshot}{}: {} in {:.1} s",
        from.map(|f| format!(" (changes since {f})"))
            .unwrap_or_default(),
        human(out.bytes),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn receive(dataset: &str, resumable: bool, json: bool) -> Result<()> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("pipe a stream from `shoal send` into `shoal receive`");
    }
    widen_pipe(&stdin);
    let started = Instant::now();
    // Payloads are read straight into the pool's block buffers (`StreamInput`).
    let mut input = pool::send::input::StreamInput::new(duplicate(&stdin, "standard input")?);
    let summary: ReceiveSummary = match Admin::connect()? {
        Admin::Daemon(api) => {
            let query = if resumable { "?resumable=true" } else { "" };
            api.post_from(&format!("/receive/{}{query}", encode(dataset)), &mut input)?
        }
        Admin::Local => {
            let state = crate::registry::state_dir();
            let all = with_datasets_syncing(dataset, |ds| {
                Ok(if resumable {
                    server::receive_tokens::receive(&state, ds, dataset, &mut input)?
                } else {
                    ds.receive_all(dataset, &mut input)?
                })
            })?;
            if !json {
                for s in &all[..all.len() - 1] {
                    print_received(s, None);
                }
            }
            ReceiveSummary::of_all(all).expect("at least one stream")
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_received(&summary, Some(started));
    }
    Ok(())
}

fn print_received(s: &ReceiveSummary, started: Option<Instant>) {
    println!(
        "received {}{}: {} objects, {} data blocks, {}{}{}",
        s.name,
        if s.incremental { " (incremental)" } else { "" },
        s.objects,
        s.data_blocks,
        human(s.bytes),
        if s.streams > 1 {
            format!(" (the last of {} streams)", s.streams)
        } else {
            String::new()
        },
        started
            .map(|t| format!(" in {:.1} s", t.elapsed().as_secs_f64()))
            .unwrap_or_default()
    );
}
