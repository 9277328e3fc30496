//! The NFSv4 client list kept for recovery after a restart: which clients may
//! reclaim their state in the grace period, and its file in the state directory
//! (written off the state lock by a thread of its own).

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The grace period after a restart (RFC 8881 section 8.4.2): the clients that held
/// state before may reclaim their opens and locks, and nobody gets new state until
/// each of them has sent RECLAIM_COMPLETE or the grace period is over.
///
/// Which clients those are is kept in the state directory: the owner of every client
/// confirmed by CREATE_SESSION, one per line in hex, rewritten (temporary file, fsync,
/// rename, fsync of the directory) when a client is confirmed or goes away, so after a
/// crash at any instant the file is the old list or the new one, never a mix.
#[derive(Default)]
pub struct Recovery {
    /// Owners confirmed in this boot (what the file holds).
    pub confirmed: std::collections::BTreeSet<Vec<u8>>,
    /// Owners of the previous boot that have not finished reclaiming.
    pub reclaimable: std::collections::HashSet<Vec<u8>>,
    pub grace_until: Option<Instant>,
    /// Writes the file off the state lock (its fsyncs must not hold up every call).
    saver: Option<Arc<Saver>>,
}

/// The writer of a small state file (the NFSv4 client list, the NLM host list):
/// the newest text waiting, and generations wanted and written, so `flush` can wait
/// for what was asked before it. Each text is written whole (`write_atomically`).
pub(crate) struct Saver {
    state: std::sync::Mutex<SaverState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct SaverState {
    text: Option<String>,
    wanted: u64,
    written: u64,
    closing: bool,
}

impl Saver {
    pub(crate) fn start(path: std::path::PathBuf) -> Arc<Saver> {
        let saver = Arc::new(Saver {
            state: std::sync::Mutex::new(SaverState::default()),
            changed: std::sync::Condvar::new(),
        });
        let s = saver.clone();
        let spawned = std::thread::Builder::new()
            .name("nfs4-clients".into())
            .spawn(move || loop {
                let (text, generation) = {
                    let mut st = s.state.lock().unwrap();
                    while st.text.is_none() && !st.closing {
                        st = s.changed.wait(st).unwrap();
                    }
                    match st.text.take() {
                        Some(t) => (t, st.wanted),
                        None => return,
                    }
                };
                if let Err(e) = write_atomically(&path, text.as_bytes()) {
                    tracing::error!(path = %path.display(), "saving a state file failed: {e}");
                }
                s.state.lock().unwrap().written = generation;
                s.changed.notify_all();
            });
        if let Err(e) = spawned {
            tracing::error!("no thread to save a state file: {e}");
        }
        saver
    }

    /// Hands `text` to the writer (the newest text wins).
    pub(crate) fn save(&self, text: String) {
        let mut st = self.state.lock().unwrap();
        st.text = Some(text);
        st.wanted += 1;
        self.changed.notify_all();
    }

    /// Waits until the text last saved is in the file.
    pub(crate) fn flush(&self) {
        let mut st = self.state.lock().unwrap();
        let want = st.wanted;
        while st.written < want {
            st = self.changed.wait(st).unwrap();
        }
    }

    /// Writes the last text, then ends the writer.
    pub(crate) fn close(&self) {
        self.flush();
        self.state.lock().unwrap().closing = true;
        self.changed.notify_all();
    }
}

impl Recovery {
    /// Reads the clients of the previous boot and starts the grace period if there
    /// were any. A missing file means there were none; an unreadable one is an error.
    pub fn open(path: std::path::PathBuf, grace: Duration) -> std::io::Result<Recovery> {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let mut reclaimable = std::collections::HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let owner = hex_decode(line.trim()).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: line {} is not hex", path.display(), i + 1),
                )
            })?;
            reclaimable.insert(owner);
        }
        let grace_until = (!reclaimable.is_empty()).then(|| Instant::now() + grace);
        Ok(Recovery {
            saver: Some(Saver::start(path)),
            confirmed: reclaimable.iter().cloned().collect(),
            reclaimable,
            grace_until,
        })
    }

    pub fn in_grace(&self, now: Instant) -> bool {
        !self.reclaimable.is_empty() && self.grace_until.is_some_and(|t| now < t)
    }

    /// Hands the list of confirmed clients to the writer (when it is kept at all).
    pub(super) fn save(&self) {
        let Some(saver) = &self.saver else { return };
        let text: String = self
            .confirmed
            .iter()
            .map(|o| format!("{}\n", hex_encode(o)))
            .collect();
        saver.save(text);
    }

    /// Waits until the list as last saved is in the file.
    pub fn flush(&self) {
        if let Some(saver) = &self.saver {
            saver.flush();
        }
    }
}

impl Drop for Recovery {
    /// The last list is written before the writer goes.
    fn drop(&mut self) {
        self.flush();
        if let Some(saver) = &self.saver {
            saver.close();
        }
    }
}

pub(crate) fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 2 * super::OPAQUE_LIMIT {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(crate) fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
