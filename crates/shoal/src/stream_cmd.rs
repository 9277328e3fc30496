//! `shoal send` and `shoal receive`: a snapshot as a stream on standard output, and a
//! stream from standard input into a filesystem, so `shoal send tank/home@mon | ssh
//! other shoal receive tank/home` copies a filesystem to another appliance. Through
//! the daemon when it runs (`/api/v1/send`, `/api/v1/receive`), else on the pool
//! directly under its lock. The stream format is in `docs/format.md`.

use crate::admin::{encode, with_datasets, with_datasets_syncing, Admin};
use crate::units::human;
use anyhow::{bail, Result};
use pool::send::receiver::ReceiveSummary;
use std::io::{IsTerminal, Write};
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

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Standard output for a stream, refusing a terminal.
fn stream_out() -> Result<Counting<std::io::BufWriter<std::io::StdoutLock<'static>>>> {
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        bail!("the stream is binary: send it into a pipe or a file, not a terminal");
    }
    Ok(Counting {
        inner: std::io::BufWriter::with_capacity(1 << 20, stdout.lock()),
        bytes: 0,
    })
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
            api.get_to(&path, &mut out)?;
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
            api.get_to(&path, &mut out)?;
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
    let started = Instant::now();
    let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
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
