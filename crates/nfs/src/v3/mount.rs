//! MOUNT v3 (RFC 1813 appendix I): MNT resolves an export path (or a directory
//! below it) to a root handle under the export rules; DUMP, UMNT, UMNTALL and EXPORT
//! keep and list the mounts clients report.

use crate::exports::Refusal;
use crate::rpc::Accept;
use crate::service::*;
use crate::transport::{Call, Reply};
use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};
use fs::Kind;
use std::sync::Arc;

impl NfsService {
    // ---- MOUNT v3 ----

    pub(crate) fn mount3(&self, call: &Call<'_>) -> Reply {
        let mut d = call.args();
        let r = match call.header.procedure {
            0 => Ok(call.reply(Accept::Success)),
            1 => self.mnt(call, &mut d),
            2 => {
                // DUMP: the mount list.
                let mut e = call.reply(Accept::Success);
                for m in self.mounts.lock().unwrap().iter() {
                    e.bool(true)
                        .opaque(m.host.as_bytes())
                        .opaque(m.path.as_bytes());
                }
                e.bool(false);
                Ok(e)
            }
            3 => (|| {
                let path = d.opaque(1024)?;
                d.finish()?;
                let host = call.peer.ip().to_string();
                let path = String::from_utf8_lossy(path).into_owned();
                self.mounts
                    .lock()
                    .unwrap()
                    .remove(&MountEntry { host, path });
                Ok(call.reply(Accept::Success))
            })(),
            4 => (|| {
                d.finish()?;
                let host = call.peer.ip().to_string();
                self.mounts.lock().unwrap().retain(|m| m.host != host);
                Ok(call.reply(Accept::Success))
            })(),
            5 => (|| {
                d.finish()?;
                let mut e = call.reply(Accept::Success);
                let mut shares: Vec<Arc<Share>> =
                    self.shares.read().unwrap().values().cloned().collect();
                shares.sort_by(|a, b| a.dataset.cmp(&b.dataset));
                for s in shares {
                    e.bool(true).opaque(s.path().as_bytes());
                    for r in &s.rules.rules {
                        e.bool(true).opaque(r.clients.to_string().as_bytes());
                    }
                    e.bool(false);
                }
                e.bool(false);
                Ok(e)
            })(),
            _ => return Reply::new(call.reply(Accept::ProcUnavail)),
        };
        match r {
            Ok(e) => Reply::new(e),
            Err(XdrError(_)) => Reply::new(call.reply(Accept::GarbageArgs)),
        }
    }

    /// MNT: the root handle of a share, or of a directory inside it.
    fn mnt(&self, call: &Call<'_>, d: &mut Decoder<'_>) -> XdrResult<Encoder> {
        let raw = d.opaque(1024)?;
        d.finish()?;
        let mut e = call.reply(Accept::Success);
        let path = String::from_utf8_lossy(raw).into_owned();
        match self.mount_path(call, &path) {
            Ok(fh) => {
                self.mounts.lock().unwrap().insert(MountEntry {
                    host: call.peer.ip().to_string(),
                    path,
                });
                e.u32(0).opaque(&fh);
                e.u32(2)
                    .u32(crate::rpc::AUTH_SYS)
                    .u32(crate::rpc::AUTH_NONE);
            }
            Err((stat, reason)) => {
                tracing::info!(peer = %call.peer, %path, ?stat, "mount refused");
                if let Some(reason) = reason {
                    self.refused(call, "mnt", reason, 0);
                }
                e.u32(stat);
            }
        }
        Ok(e)
    }

    /// mountstat3 values: NOENT 2, ACCES 13, NOTDIR 20, INVAL 22, NAMETOOLONG 63; with
    /// the refusal reason when the path or the client was refused.
    fn mount_path(
        &self,
        call: &Call<'_>,
        path: &str,
    ) -> Result<Vec<u8>, (u32, Option<&'static str>)> {
        let clean: Vec<&str> = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        if clean.contains(&"..") {
            return Err((13, Some("path_escape")));
        }
        let shares: Vec<Arc<Share>> = self.shares.read().unwrap().values().cloned().collect();
        // The share whose dataset is the longest prefix of the path.
        let (share, depth) = shares
            .iter()
            .filter_map(|s| {
                let parts: Vec<&str> = s.dataset.split('/').collect();
                (clean.len() >= parts.len() && clean[..parts.len()] == parts[..])
                    .then_some((s.clone(), parts.len()))
            })
            .max_by_key(|(_, n)| *n)
            .ok_or((2u32, Some("not_exported")))?;
        share
            .rules
            .access(call.peer, &call.header.credential)
            .map_err(|r: Refusal| (13u32, Some(r.reason())))?;
        let mut attr = share
            .fs
            .getattr(fs::filesystem::ROOT_INO)
            .map_err(|_| (5u32, None))?;
        for c in &clean[depth..] {
            if attr.kind != Kind::Dir {
                return Err((20, None));
            }
            attr = share
                .fs
                .lookup(attr.ino, c.as_bytes())
                .map_err(|e| match e {
                    fs::FsError::NotFound(_) => (2u32, None),
                    fs::FsError::NameTooLong => (63, None),
                    _ => (5, None),
                })?;
        }
        if attr.kind != Kind::Dir {
            return Err((20, None));
        }
        Ok(self.handle_for(&share, &attr))
    }
}
