//! The pseudo-filesystem: `/` and the directories above shared datasets, so that
//! `mount nas:/ /mnt` shows `tank/home` and `mount nas:/tank/home /mnt` walks there
//! with LOOKUPs, as NFSv4 clients do.
//!
//! A pseudo directory exists while some share lies below it, and a client sees it
//! only if one of those shares admits the client. From the root directory of a share,
//! a LOOKUP of a name that leads to a nested shared dataset crosses into it (the fsid
//! changes, as at a mount point). Pseudo directories are read-only and owned by root.
//!
//! Pseudo handles are 17 bytes: 0xF5, then the first 16 bytes of the BLAKE3 hash of the
//! path. They name a path, not an object, so they stay valid across restarts as long
//! as the path still leads to shares; they grant nothing but the names of exports.

use super::attrs::{change_of, Obj};
use crate::service::{NfsService, Share};
use crate::transport::Call;
use fs::{Kind, Timespec};
use std::sync::Arc;

pub const PSEUDO_HANDLE_TAG: u8 = 0xf5;
/// The fsid of the pseudo-filesystem ("PSEUDOFS" in ASCII).
pub const PSEUDO_FSID: (u64, u64) = (0x5053_4555_444f_4653, 0);

/// A current file handle of a COMPOUND.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fh {
    /// A pseudo directory by its path without slashes at either end ("" is `/`).
    Pseudo(String),
    /// A file handle made by `NfsService::file_handle` (all of one length: no
    /// allocation for the handle every COMPOUND sets).
    File([u8; crate::handle::HANDLE_LEN]),
}

/// Where a name in a pseudo directory (or a share's root) leads.
pub enum Child {
    Pseudo(String),
    Share(Arc<Share>),
}

pub fn pseudo_handle(path: &str) -> Vec<u8> {
    let mut h = vec![PSEUDO_HANDLE_TAG];
    h.extend_from_slice(&blake3::hash(path.as_bytes()).as_bytes()[..16]);
    h
}

pub fn pseudo_fileid(path: &str) -> u64 {
    // Never 0 or 1 (some clients treat those specially).
    u64::from_le_bytes(
        blake3::hash(path.as_bytes()).as_bytes()[..8]
            .try_into()
            .unwrap(),
    ) | 2
}

fn parent_of(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    Some(path.rsplit_once('/').map_or("", |(p, _)| p))
}

impl NfsService {
    /// The shares this client may use.
    pub(crate) fn visible_shares(&self, call: &Call<'_>) -> Vec<Arc<Share>> {
        self.shares
            .read()
            .unwrap()
            .values()
            .filter(|s| s.rules.access(call.peer, &call.header.credential).is_ok())
            .cloned()
            .collect()
    }

    /// The pseudo directory a handle names, if it is one this client can see.
    pub(crate) fn pseudo_path_of(&self, call: &Call<'_>, fh: &[u8]) -> Option<String> {
        if fh.len() != 17 || fh[0] != PSEUDO_HANDLE_TAG {
            return None;
        }
        let mut paths = vec![String::new()];
        for s in self.visible_shares(call) {
            let mut p = s.dataset.as_str();
            while let Some(parent) = parent_of(p) {
                paths.push(parent.to_string());
                p = parent;
            }
        }
        paths.into_iter().find(|p| pseudo_handle(p) == fh)
    }

    /// What `name` in directory `dir` (a pseudo path or a share's dataset) leads to
    /// in the pseudo namespace: a pseudo directory or a share; `None` if nothing
    /// shared lies there (in a share's root: look in the share itself).
    pub(crate) fn pseudo_child(&self, call: &Call<'_>, dir: &str, name: &str) -> Option<Child> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return None;
        }
        let path = if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        };
        let shares = self.visible_shares(call);
        if let Some(s) = shares.iter().find(|s| s.dataset == path) {
            return Some(Child::Share(s.clone()));
        }
        let below = format!("{path}/");
        shares
            .iter()
            .any(|s| s.dataset.starts_with(&below))
            .then_some(Child::Pseudo(path))
    }

    /// The names in a pseudo directory, sorted.
    pub(crate) fn pseudo_list(&self, call: &Call<'_>, dir: &str) -> Vec<(String, Child)> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<String> = self
            .visible_shares(call)
            .iter()
            .filter_map(|s| s.dataset.strip_prefix(&prefix).map(|r| r.to_string()))
            .filter(|r| !r.is_empty())
            .map(|r| r.split('/').next().unwrap_or("").to_string())
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| {
                let c = self.pseudo_child(call, dir, &n)?;
                Some((n, c))
            })
            .collect()
    }

    /// Where `..` of a share's root or a pseudo directory leads.
    pub(crate) fn pseudo_parent(&self, call: &Call<'_>, path: &str) -> Option<Child> {
        let parent = parent_of(path)?;
        let shares = self.visible_shares(call);
        if let Some(s) = shares.iter().find(|s| s.dataset == parent) {
            return Some(Child::Share(s.clone()));
        }
        Some(Child::Pseudo(parent.to_string()))
    }

    /// The root handle of a share.
    pub(crate) fn share_root_handle(
        &self,
        share: &Share,
    ) -> Option<[u8; crate::handle::HANDLE_LEN]> {
        let a = share.fs.getattr(fs::filesystem::ROOT_INO).ok()?;
        Some(self.file_handle(share, &a))
    }
}

/// The attributes of a pseudo directory.
pub fn pseudo_obj(path: &str, boot: Timespec, lease_seconds: u32) -> Obj {
    Obj {
        kind: Kind::Dir,
        change: change_of(boot),
        size: 4096,
        fsid: PSEUDO_FSID,
        fileid: pseudo_fileid(path),
        mounted_on_fileid: pseudo_fileid(path),
        perm: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        rdev: (0, 0),
        used: 4096,
        atime: boot,
        mtime: boot,
        ctime: boot,
        crtime: boot,
        fh: pseudo_handle(path),
        statfs: None,
        named_attrs: false,
        lease_seconds,
        names: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_and_handles() {
        assert_eq!(parent_of("tank/home"), Some("tank"));
        assert_eq!(parent_of("tank"), Some(""));
        assert_eq!(parent_of(""), None);
        assert_ne!(pseudo_handle(""), pseudo_handle("tank"));
        assert_eq!(pseudo_handle("tank").len(), 17);
        assert!(pseudo_fileid("") > 1);
    }
}
