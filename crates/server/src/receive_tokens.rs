//! Resume tokens of `shoal receive --resumable` (and `POST /api/v1/receive/{fs}
//! ?resumable=true`): where a receive cut short got to, kept per filesystem in
//! `receive-resume/<fs>.json` in the state directory, so that `shoal send --resume
//! TOKEN` (`GET /api/v1/send-resume/{token}`) sends only the rest.
//!
//! A token is the point (`pool::send::receiver::ResumePoint`: the snapshot identities
//! and the position) as 64 hex digits; the sender finds the snapshots by identity in
//! the pool of the filesystem it is told to send from. The file holds the object set id of the filesystem the point was made in, so a
//! filesystem destroyed and received anew under the name never takes a stale point.
//! Each file is written whole (`write_atomically`); a crash leaves the old point,
//! which is never ahead of what the pool committed (it is recorded after the commit).

use crate::{write_atomically, Result, ServerError};
use pool::send::receiver::ResumePoint;
use pool::send::Position;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    local_objset: u64,
    point: ResumePoint,
}

fn file(state_dir: &Path, dataset: &str) -> PathBuf {
    state_dir
        .join("receive-resume")
        .join(format!("{}.json", dataset.replace('/', "%2F")))
}

/// The point a resumed stream into `dataset` (object set `objset`) must start at,
/// with the token to ask for it.
pub fn load(state_dir: &Path, dataset: &str, objset: Option<u64>) -> Option<(ResumePoint, String)> {
    let bytes = std::fs::read(file(state_dir, dataset)).ok()?;
    let e: Entry = serde_json::from_slice(&bytes).ok()?;
    (Some(e.local_objset) == objset).then(|| (e.point, token(&e.point)))
}

/// Records the point `dataset` (object set `objset`) reached, or forgets it (`None`).
pub fn record(
    state_dir: &Path,
    dataset: &str,
    objset: u64,
    point: Option<ResumePoint>,
) -> Result<()> {
    let path = file(state_dir, dataset);
    match point {
        Some(point) => {
            let e = Entry {
                local_objset: objset,
                point,
            };
            write_atomically(&path, &serde_json::to_vec(&e).expect("serialises"), 0o644)
        }
        None => match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ServerError::Io(format!("removing {}", path.display()), e)),
        },
    }
}

pub fn token(p: &ResumePoint) -> String {
    format!(
        "{:016x}{:016x}{:016x}{:016x}",
        p.to_guid, p.from_guid, p.at.obj, p.at.blkid
    )
}

pub fn parse_token(t: &str) -> Result<ResumePoint> {
    let bad = || ServerError::Config(format!("'{t}' is not a resume token (64 hex digits)"));
    if t.len() != 64 || !t.is_ascii() {
        return Err(bad());
    }
    let n = |i: usize| u64::from_str_radix(&t[i * 16..(i + 1) * 16], 16).map_err(|_| bad());
    Ok(ResumePoint {
        to_guid: n(0)?,
        from_guid: n(1)?,
        at: Position {
            obj: n(2)?,
            blkid: n(3)?,
        },
    })
}

/// The object set ids to send the rest of a stream from: the snapshot the point
/// names and its base, in the pool of `ds`.
pub fn resumed_ids(ds: &fs::Datasets, p: &ResumePoint) -> Result<(u64, Option<u64>)> {
    let (to, _) = ds.snapshot_by_guid(p.to_guid).ok_or_else(|| {
        ServerError::NotFound(format!(
            "no snapshot {:#x} in pool '{}' (the token's stream)",
            p.to_guid,
            ds.pool().name
        ))
    })?;
    let from = match p.from_guid {
        0 => None,
        g => Some(
            ds.snapshot_by_guid(g)
                .ok_or_else(|| ServerError::NotFound(format!("no base snapshot {g:#x}")))?
                .0,
        ),
    };
    Ok((to, from))
}

/// Receives resumably into `dataset`, keeping the point in the state directory;
/// an error names the token to resume with.
pub fn receive(
    state_dir: &Path,
    ds: &fs::Datasets,
    dataset: &str,
    input: &mut dyn std::io::BufRead,
) -> Result<Vec<pool::send::receiver::ReceiveSummary>> {
    let expect = load(state_dir, dataset, ds.pool().objset_id(dataset)).map(|(p, _)| p);
    let mut last: Option<String> = None;
    let got = ds.receive_all_resumable(dataset, input, expect, &mut |point| {
        let objset = ds.pool().objset_id(dataset).unwrap_or(0);
        if let Err(e) = record(state_dir, dataset, objset, point) {
            tracing::warn!(%dataset, error = %e, "keeping the resume point");
        }
        last = point.map(|p| token(&p));
    });
    match got {
        Ok(all) => Ok(all),
        Err(e) => match last
            .or_else(|| load(state_dir, dataset, ds.pool().objset_id(dataset)).map(|(_, t)| t))
        {
            Some(t) => Err(ServerError::Config(format!(
                "{e}; what arrived is kept: resume with `shoal send --resume {t} \
                 SOURCE_FS | shoal receive --resumable {dataset}`"
            ))),
            None => Err(e.into()),
        },
    }
}
