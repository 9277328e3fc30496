//! Datasets of one pool: the `pool/a/b` hierarchy, each dataset an object set holding a
//! filesystem or a volume (`volume.rs`; its properties carry a `volsize`), with local
//! properties in the pool's object-set directory. The dataset named like the pool is
//! its root (a filesystem) and is made on first use. Creating a dataset makes its
//! object set, stores its properties and lays out its root directory or volume object
//! in one pool transaction, so a crash leaves either no dataset or a usable one. A
//! volume has no children.

use crate::filesystem::Filesystem;
use crate::props::{resolve, EffectiveProps, PropValue, Props, FILESYSTEM_ONLY};
use crate::space::SpaceLimits;
use crate::volume::{self, Volume};
use crate::{FsError, Result};
use pool::pool::SnapshotInfo;
use pool::Pool;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct DatasetInfo {
    pub name: String,
    pub objset: u64,
    pub props: Vec<PropValue>,
}

impl DatasetInfo {
    /// The value of property (or statistic) `name`.
    pub fn prop(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|p| p.property == name)
            .map(|p| p.value.as_str())
    }
}

/// What `Datasets::prune` did: the snapshots destroyed, and those it could not
/// destroy (in use, being sent) with why.
#[derive(Debug, Default)]
pub struct Pruned {
    pub destroyed: Vec<String>,
    pub failed: Vec<(String, FsError)>,
}

/// One hold on a snapshot, as `shoal snapshot holds` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HoldInfo {
    /// `pool/fs@name`
    pub snapshot: String,
    pub tag: String,
    /// When it was placed (unix seconds).
    pub created_unix: u64,
}

/// The pool a dataset or snapshot name (`pool/a/b@snap`) lives in.
pub fn pool_of(name: &str) -> &str {
    name.split(['/', '@']).next().unwrap_or(name)
}

/// The two types of dataset: a tree of files, or a run of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatasetType {
    Filesystem,
    Volume,
}

impl DatasetType {
    /// The dataset property `type`'s value.
    pub fn name(self) -> &'static str {
        match self {
            DatasetType::Filesystem => "filesystem",
            DatasetType::Volume => "volume",
        }
    }

    pub fn other(self) -> DatasetType {
        match self {
            DatasetType::Filesystem => DatasetType::Volume,
            DatasetType::Volume => DatasetType::Filesystem,
        }
    }
}

impl std::fmt::Display for DatasetType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub struct Datasets {
    pool: Arc<Pool>,
    open: Mutex<HashMap<u64, Arc<Filesystem>>>,
    volumes: Mutex<HashMap<u64, Arc<Volume>>>,
    limits: Arc<SpaceLimits>,
    /// Held through a rollback (`rollback_with`).
    rollbacks: Mutex<()>,
}

/// What a volume is made with (`Datasets::create_volume`).
#[derive(Debug, Clone, Default)]
pub struct VolumeSpec {
    /// Bytes, a multiple of the block size.
    pub volsize: u64,
    /// `None`: `volume::VOLBLOCKSIZE_DEFAULT`.
    pub volblocksize: Option<u32>,
    /// No refreservation: space is taken as blocks are written, and a write may find
    /// the pool full.
    pub sparse: bool,
}

impl Datasets {
    pub fn new(pool: Arc<Pool>) -> Result<Datasets> {
        let d = Datasets {
            pool,
            open: Mutex::new(HashMap::new()),
            volumes: Mutex::new(HashMap::new()),
            limits: Arc::new(SpaceLimits::default()),
            rollbacks: Mutex::new(()),
        };
        if d.pool.objset_id(&d.pool.name).is_none() {
            d.make(&d.pool.name.clone(), Props::default())?;
        }
        d.limits.refresh(&d.pool)?;
        Ok(d)
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn check_name(&self, name: &str) -> Result<()> {
        let root = &self.pool.name;
        let ok = name == root
            || name
                .strip_prefix(root.as_str())
                .is_some_and(|r| r.starts_with('/'));
        if !ok {
            return Err(FsError::Invalid(format!(
                "dataset '{name}' must be '{root}' or start with '{root}/'"
            )));
        }
        if name.split('/').any(|c| {
            c.is_empty()
                || !c
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "_-.:".contains(ch))
        }) || name.len() > 255
        {
            return Err(FsError::Invalid(format!(
                "dataset name '{name}': use letters, digits and _ - . : between slashes (at most 255)"
            )));
        }
        Ok(())
    }

    fn make(&self, name: &str, props: Props) -> Result<u64> {
        let tx = self.pool.begin(64 * 1024)?;
        let os = tx.create_objset(name, &props.to_json())?;
        Filesystem::format(&tx, &self.pool, os)?;
        Ok(os)
    }

    /// Creates filesystem `name` with the given properties (`[("compression", "lz4")]`).
    pub fn create(&self, name: &str, settings: &[(String, String)]) -> Result<DatasetInfo> {
        self.check_new(name)?;
        let mut props = Props::default();
        for (k, v) in settings {
            props.set(k, v)?;
        }
        self.make(name, props)?;
        self.limits.refresh(&self.pool)?;
        self.info(name)
    }

    /// Checks a name for a new dataset: free, and below an existing filesystem.
    fn check_new(&self, name: &str) -> Result<()> {
        self.check_name(name)?;
        if self.pool.objset_id(name).is_some() {
            return Err(FsError::Exists);
        }
        let parent = name.rsplit_once('/').map(|p| p.0).unwrap_or("");
        if self.pool.objset_id(parent).is_none() {
            return Err(FsError::NotFound(format!(": parent dataset '{parent}'")));
        }
        if self.is_volume(parent)? {
            return Err(FsError::Invalid(format!(
                "'{parent}' is a volume; a dataset's parent must be a filesystem"
            )));
        }
        Ok(())
    }

    /// Creates volume `name`: thick unless `spec.sparse` (a refreservation covering
    /// every block, refused with `NoSpace` when the pool cannot hold it), with the
    /// given properties besides (`compression`, `checksum`, `sync`, `readonly`,
    /// `reservation`, `refreservation`).
    pub fn create_volume(
        &self,
        name: &str,
        spec: &VolumeSpec,
        settings: &[(String, String)],
    ) -> Result<DatasetInfo> {
        self.check_new(name)?;
        let block_size = spec.volblocksize.unwrap_or(volume::VOLBLOCKSIZE_DEFAULT);
        volume::check_geometry(spec.volsize, block_size)?;
        let mut props = Props::default();
        for (k, v) in settings {
            if FILESYSTEM_ONLY.contains(&k.as_str()) {
                return Err(FsError::Invalid(format!("a volume has no {k}")));
            }
            props.set(k, v)?;
        }
        props.volsize = Some(spec.volsize);
        props.volblocksize = Some(block_size);
        if !spec.sparse && props.refreservation.is_none() {
            props.refreservation = Some(volume::thick_refreservation(spec.volsize, block_size));
        }
        self.limits
            .admit_new(&self.pool, name, props.refreservation.unwrap_or(0))?;
        // The effective properties the volume object is made with: its own settings
        // over its parent's.
        let parent = name.rsplit_once('/').map(|p| p.0).unwrap_or("");
        let mut chain = vec![(name.to_string(), props.clone())];
        chain.extend(self.chain(parent)?);
        let effective = resolve(&chain).0;
        let tx = self.pool.begin(64 * 1024)?;
        let os = tx.create_objset(name, &props.to_json())?;
        Volume::format(&tx, os, block_size, &effective)?;
        drop(tx);
        self.limits.refresh(&self.pool)?;
        self.info(name)
    }

    /// Whether dataset `name` (or the dataset of snapshot `name`) is a volume.
    pub fn is_volume(&self, name: &str) -> Result<bool> {
        let dataset = name.split('@').next().unwrap_or(name);
        Ok(self.local(dataset)?.1.is_volume())
    }

    /// The type of dataset `name` (or of the dataset of snapshot `name`).
    pub fn dataset_type(&self, name: &str) -> Result<DatasetType> {
        Ok(if self.is_volume(name)? {
            DatasetType::Volume
        } else {
            DatasetType::Filesystem
        })
    }

    /// Refuses a dataset (or snapshot) of the other type than `want` with
    /// `FsError::WrongType`, the one rule the API and the CLI both apply.
    pub fn require_type(&self, name: &str, want: DatasetType) -> Result<()> {
        let is = self.dataset_type(name)?;
        if is != want {
            return Err(FsError::WrongType {
                name: name.to_string(),
                is,
            });
        }
        Ok(())
    }

    fn local(&self, name: &str) -> Result<(u64, Props)> {
        let (id, _, json) = self
            .pool
            .list_objsets()
            .into_iter()
            .find(|(_, n, _)| n == name)
            .ok_or_else(|| FsError::NotFound(format!(": dataset '{name}'")))?;
        Ok((id, Props::from_json(&json)?))
    }

    fn chain(&self, name: &str) -> Result<Vec<(String, Props)>> {
        let all = self.pool.list_objsets();
        let mut chain = Vec::new();
        let mut at = Some(name.to_string());
        while let Some(n) = at {
            let json = all
                .iter()
                .find(|(_, nm, _)| *nm == n)
                .map(|x| x.2.clone())
                .ok_or_else(|| FsError::NotFound(format!(": dataset '{n}'")))?;
            chain.push((n.clone(), Props::from_json(&json)?));
            at = n.rsplit_once('/').map(|p| p.0.to_string());
        }
        Ok(chain)
    }

    pub fn effective(&self, name: &str) -> Result<EffectiveProps> {
        Ok(resolve(&self.chain(name)?).0)
    }

    pub fn info(&self, name: &str) -> Result<DatasetInfo> {
        let (id, local) = self.local(name)?;
        let mut props = resolve(&self.chain(name)?).1;
        let kind = if local.is_volume() {
            props.retain(|p| !FILESYSTEM_ONLY.contains(&p.property.as_str()));
            for (property, source) in [("volsize", "local"), ("volblocksize", "-")] {
                props.insert(
                    0,
                    PropValue {
                        property: property.into(),
                        value: local.get(property).unwrap_or_default(),
                        source: source.into(),
                    },
                );
            }
            props.swap(0, 1);
            "volume"
        } else {
            "filesystem"
        };
        props.insert(
            0,
            PropValue {
                property: "type".into(),
                value: kind.into(),
                source: "-".into(),
            },
        );
        let usage = self.limits.usage(&self.pool, id);
        for (property, bytes) in [
            ("used", usage.used),
            ("available", usage.available),
            ("referenced", usage.own.referenced),
            ("usedbysnapshots", usage.own.snapshots),
        ] {
            props.push(PropValue {
                property: property.into(),
                value: bytes.to_string(),
                source: "-".into(),
            });
        }
        Ok(DatasetInfo {
            name: name.to_string(),
            objset: id,
            props,
        })
    }

    pub fn list(&self) -> Result<Vec<DatasetInfo>> {
        let mut names: Vec<String> = self.pool.list_objsets().into_iter().map(|x| x.1).collect();
        names.sort();
        names.iter().map(|n| self.info(n)).collect()
    }

    /// Sets (`Some`) or inherits (`None`) a property; open filesystems below see it.
    pub fn set(&self, name: &str, prop: &str, value: Option<&str>) -> Result<()> {
        self.set_many(name, &[(prop.to_string(), value.map(str::to_string))])
    }

    /// Sets and inherits several properties in one change: every one is checked
    /// before any is stored, so a bad one leaves the dataset as it was.
    ///
    /// A volume's `volsize` grows it (online: an open volume takes the new size at
    /// once); it never shrinks, and a thick volume's refreservation grows with it. Its
    /// `volblocksize` is fixed, and it has no filesystem properties.
    pub fn set_many(&self, name: &str, changes: &[(String, Option<String>)]) -> Result<()> {
        let (id, mut props) = self.local(name)?;
        let was = props.clone();
        for (prop, value) in changes {
            let prop = prop.as_str();
            if props.is_volume() {
                if FILESYSTEM_ONLY.contains(&prop) {
                    return Err(FsError::Invalid(format!("a volume has no {prop}")));
                }
                if prop == "volblocksize" {
                    return Err(FsError::Invalid(
                        "volblocksize is fixed when a volume is made".into(),
                    ));
                }
                if prop == "volsize" {
                    let v = value
                        .as_deref()
                        .ok_or_else(|| FsError::Invalid("volsize cannot be inherited".into()))?;
                    props.volsize = Some(self.new_volsize(name, &props, v)?);
                    continue;
                }
            } else if matches!(prop, "volsize" | "volblocksize") {
                return Err(FsError::Invalid(format!(
                    "only a volume has a {prop}; '{name}' is a filesystem"
                )));
            }
            match value {
                Some(v) => props.set(prop, v)?,
                None => props.inherit(prop)?,
            }
        }
        if let (Some(old), Some(new), Some(bs)) = (was.volsize, props.volsize, props.volblocksize) {
            // A thick volume stays thick: its refreservation follows its size unless
            // this change sets it.
            let thick_was = volume::thick_refreservation(old, bs);
            let set_here = changes.iter().any(|(p, _)| p == "refreservation");
            if new != old && !set_here && was.refreservation == Some(thick_was) {
                props.refreservation = Some(volume::thick_refreservation(new, bs));
            }
        }
        let refres = props.refreservation.unwrap_or(0);
        if refres > was.refreservation.unwrap_or(0) {
            self.limits.admit_refreservation(&self.pool, id, refres)?;
        }
        self.pool.set_objset_props(id, &props.to_json())?;
        self.limits.refresh(&self.pool)?;
        if let (Some(size), Some(v)) = (
            props.volsize,
            self.volumes.lock().unwrap().get(&id).cloned(),
        ) {
            v.set_props(size, self.effective(name)?)?;
        }
        let open = self.open.lock().unwrap();
        for (_, n, _) in self.pool.list_objsets() {
            if n == name || n.starts_with(&format!("{name}/")) {
                if let Some(fs) = self.pool.objset_id(&n).and_then(|id| open.get(&id)) {
                    fs.set_props(self.effective(&n)?);
                }
            }
        }
        Ok(())
    }

    /// A volume's new size from its text form: a multiple of its block size, no
    /// smaller than it is.
    fn new_volsize(&self, name: &str, props: &Props, value: &str) -> Result<u64> {
        let bs = props.volblocksize.unwrap_or(volume::VOLBLOCKSIZE_DEFAULT);
        let v = crate::props::parse_size(value)
            .filter(|v| *v > 0)
            .ok_or_else(|| FsError::Invalid(format!("volsize must be a size, not '{value}'")))?;
        volume::check_geometry(v, bs)?;
        let now = props.volsize.unwrap_or(0);
        if v < now {
            return Err(FsError::Invalid(format!(
                "volume '{name}' is {now} bytes; it grows but never shrinks (to {v}),                  as what initiators wrote past the new end would be lost"
            )));
        }
        Ok(v)
    }

    pub fn destroy(&self, name: &str) -> Result<()> {
        self.check_name(name)?;
        if name == self.pool.name {
            return Err(FsError::Invalid(format!(
                "'{name}' is the pool's root dataset; destroy the pool instead"
            )));
        }
        let (id, _) = self.local(name)?;
        let prefix = format!("{name}/");
        if let Some((_, child, _)) = self
            .pool
            .list_objsets()
            .into_iter()
            .find(|(_, n, _)| n.starts_with(&prefix))
        {
            return Err(FsError::Invalid(format!(
                "'{name}' has children ({child}); destroy them first"
            )));
        }
        if self.in_use(id) {
            return Err(FsError::Invalid(format!(
                "'{name}' is in use (shared, mounted or served as a LUN); stop serving it \
                 first"
            )));
        }
        self.forget(id);
        self.pool.destroy_objset(id)?;
        self.limits.refresh(&self.pool)?;
        Ok(())
    }

    /// The filesystem of `name`, opened once and shared.
    /// Splits `pool/fs@snap` into its dataset and snapshot names.
    fn split_snapshot<'a>(&self, full: &'a str) -> Result<(&'a str, &'a str)> {
        let (dataset, snap) = full.split_once('@').ok_or_else(|| {
            FsError::Invalid(format!("'{full}' is not a snapshot name (dataset@name)"))
        })?;
        self.check_name(dataset)?;
        if snap.is_empty()
            || snap.len() > 64
            || !snap
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "_-.:".contains(ch))
        {
            return Err(FsError::Invalid(format!(
                "snapshot name '{snap}': use letters, digits and _ - . : (at most 64)"
            )));
        }
        Ok((dataset, snap))
    }

    fn snapshot_id(&self, full: &str) -> Result<u64> {
        self.split_snapshot(full)?;
        self.pool
            .objset_id(full)
            .ok_or_else(|| FsError::NotFound(format!(": snapshot '{full}'")))
    }

    /// Takes snapshot `pool/fs@name` of everything written to the dataset so far.
    pub fn snapshot(&self, full: &str) -> Result<SnapshotInfo> {
        let (dataset, snap) = self.split_snapshot(full)?;
        self.snapshot_recursive(dataset, snap, false)?;
        self.snapshots(Some(dataset))?
            .into_iter()
            .find(|s| s.name == full)
            .ok_or_else(|| FsError::Io(format!("snapshot '{full}' vanished")))
    }

    /// Takes snapshot `short` of `dataset`, and of its descendants when `recursive`,
    /// all in one transaction group (`Pool::snapshot_create_many`). Answers their
    /// full names, the dataset's first.
    pub fn snapshot_recursive(
        &self,
        dataset: &str,
        short: &str,
        recursive: bool,
    ) -> Result<Vec<String>> {
        self.split_snapshot(&format!("{dataset}@{short}"))?;
        let (id, _) = self.local(dataset)?;
        let mut targets = vec![(id, dataset.to_string())];
        if recursive {
            let prefix = format!("{dataset}/");
            let mut children: Vec<(u64, String)> = self
                .pool
                .list_objsets()
                .into_iter()
                .filter(|(_, n, _)| n.starts_with(&prefix))
                .map(|(id, n, _)| (id, n))
                .collect();
            children.sort_by(|a, b| a.1.cmp(&b.1));
            targets.extend(children);
        }
        // A snapshot takes its dataset's unique bytes: a refreservation must fit again
        // beside them (figures as of a sync).
        let mut synced = false;
        for (id, n) in &targets {
            if self.local(n)?.1.refreservation.unwrap_or(0) > 0 {
                if !synced {
                    self.pool.sync()?;
                    synced = true;
                }
                self.limits.admit_snapshot(&self.pool, *id)?;
            }
        }
        let ids: Vec<u64> = targets.iter().map(|(id, _)| *id).collect();
        self.pool.snapshot_create_many(&ids, short)?;
        Ok(targets
            .into_iter()
            .map(|(_, n)| format!("{n}@{short}"))
            .collect())
    }

    /// Snapshots, oldest first per dataset; of one dataset when given.
    pub fn snapshots(&self, dataset: Option<&str>) -> Result<Vec<SnapshotInfo>> {
        let id = match dataset {
            Some(d) => Some(self.local(d)?.0),
            None => None,
        };
        Ok(self.pool.list_snapshots(id)?)
    }

    /// (object set id, `dataset@name`) of a dataset's snapshots, oldest first, without
    /// the space accounting `snapshots` reads dead lists for.
    pub fn snapshot_names(&self, dataset: &str) -> Result<Vec<(u64, String)>> {
        let (id, _) = self.local(dataset)?;
        Ok(self.pool.snapshot_names(id))
    }

    /// Writes snapshot `full` (`pool/fs@name`) as a stream: in full, or with `from`
    /// (an older snapshot of the same filesystem, `pool/fs@older` or `@older`) only
    /// the changes since it. See `pool::send`.
    pub fn send(
        &self,
        full: &str,
        from: Option<&str>,
        out: &mut dyn std::io::Write,
    ) -> Result<pool::send::writer::SendSummary> {
        let (id, from_id) = self.send_ids(full, from)?;
        Ok(pool::send::writer::send(&self.pool, id, from_id, out)?)
    }

    /// The streams of a replicated send (`shoal send -R`): each snapshot of the
    /// dataset up to `full`, oldest first, as (snapshot, base) object set ids: the
    /// first in full (or, with `from`, the first after `from` as an incremental on it),
    /// each later one as an incremental on the one before. Their concatenation
    /// recreates every snapshot on a receiver (`receive_all`).
    pub fn replicated_send_ids(
        &self,
        full: &str,
        from: Option<&str>,
    ) -> Result<Vec<(u64, Option<u64>)>> {
        let (to, base) = self.send_ids(full, from)?;
        let (dataset, _) = self.split_snapshot(full)?;
        let names = self.snapshot_names(dataset)?;
        let position = |id: u64| names.iter().position(|(i, _)| *i == id);
        let last = position(to).ok_or_else(|| FsError::NotFound(format!(": snapshot '{full}'")))?;
        let first = match base {
            None => 0,
            Some(b) => {
                position(b)
                    .ok_or_else(|| FsError::NotFound(format!(": base snapshot of '{full}'")))?
                    + 1
            }
        };
        let mut out = Vec::new();
        let mut prev = base;
        for (id, _) in &names[first..=last] {
            out.push((*id, prev));
            prev = Some(*id);
        }
        Ok(out)
    }

    /// Writes the streams `replicated_send_ids` names, one after another.
    pub fn send_replicated(
        &self,
        full: &str,
        from: Option<&str>,
        out: &mut dyn std::io::Write,
    ) -> Result<Vec<pool::send::writer::SendSummary>> {
        let mut sent = Vec::new();
        for (id, base) in self.replicated_send_ids(full, from)? {
            sent.push(pool::send::writer::send(&self.pool, id, base, out)?);
        }
        Ok(sent)
    }

    /// Receives every stream on `input`, one after another, into filesystem `name`
    /// (a replicated send, or any concatenation of streams that apply in turn). Each
    /// is received as by `receive`: one that is refused leaves the filesystem as the
    /// streams before it made it. Returns the summary of each.
    pub fn receive_all(
        &self,
        name: &str,
        input: &mut dyn std::io::BufRead,
    ) -> Result<Vec<pool::send::receiver::ReceiveSummary>> {
        let mut received = Vec::new();
        while received.is_empty() || !input_ended(input)? {
            received.push(self.receive(name, input)?);
        }
        Ok(received)
    }

    /// `receive_all`, resumably (`pool::send::receiver`): what arrives stays when the
    /// input ends early; `record` hears `Some(point)` after each commit a later
    /// stream may resume at, and `None` once a stream is whole. `expect` is the point
    /// the first stream may resume at, if it is a resumed one.
    pub fn receive_all_resumable(
        &self,
        name: &str,
        input: &mut dyn std::io::BufRead,
        mut expect: Option<pool::send::receiver::ResumePoint>,
        record: &mut dyn FnMut(Option<pool::send::receiver::ResumePoint>),
    ) -> Result<Vec<pool::send::receiver::ReceiveSummary>> {
        use pool::send::receiver::{Resumable, RESUME_REPORT_EVERY};
        let mut received = Vec::new();
        while received.is_empty() || !input_ended(input)? {
            let got = self.receive_with(
                name,
                input,
                Some(Resumable {
                    expect: expect.take(),
                    progress: &mut |p| record(Some(p)),
                    report_every: RESUME_REPORT_EVERY,
                }),
            )?;
            record(None);
            received.push(got);
        }
        Ok(received)
    }

    /// A snapshot of any dataset of the pool by its identity: (object set id, name).
    pub fn snapshot_by_guid(&self, guid: u64) -> Option<(u64, String)> {
        self.pool
            .list_objsets()
            .into_iter()
            .flat_map(|(id, _, _)| self.pool.snapshot_names(id))
            .find(|(id, _)| self.pool.snapshot_guid(*id) == Some(guid))
    }

    /// The object set ids `send` would send: the snapshot's and its base's.
    pub fn send_ids(&self, full: &str, from: Option<&str>) -> Result<(u64, Option<u64>)> {
        let id = self.snapshot_id(full)?;
        let from_id = match from {
            None => None,
            Some(f) => {
                let (dataset, _) = self.split_snapshot(full)?;
                let f = match f.strip_prefix('@') {
                    Some(short) => format!("{dataset}@{short}"),
                    None => f.to_string(),
                };
                Some(self.snapshot_id(&f)?)
            }
        };
        Ok((id, from_id))
    }

    /// Receives a stream into filesystem `name`: a full stream creates it (its parent
    /// must exist), an incremental applies on its latest snapshot, which must be the
    /// stream's base; the filesystem must not be open here (mounted or shared), as an
    /// incremental first rolls it back to that snapshot.
    pub fn receive(
        &self,
        name: &str,
        input: &mut dyn std::io::Read,
    ) -> Result<pool::send::receiver::ReceiveSummary> {
        self.receive_with(name, input, None)
    }

    /// `receive`, resumable when `resumable` is given (`pool::send::receiver`): what
    /// arrived stays when the stream ends early, and a stream resumed from the point
    /// reported completes it.
    pub fn receive_with(
        &self,
        name: &str,
        input: &mut dyn std::io::Read,
        resumable: Option<pool::send::receiver::Resumable<'_>>,
    ) -> Result<pool::send::receiver::ReceiveSummary> {
        self.check_name(name)?;
        if name == self.pool.name {
            return Err(FsError::Invalid(
                "a stream is received into a filesystem below the pool's own".into(),
            ));
        }
        let parent = name.rsplit_once('/').map(|p| p.0).unwrap_or("");
        if self.pool.objset_id(parent).is_none() {
            return Err(FsError::NotFound(format!(": parent dataset '{parent}'")));
        }
        if let Some(id) = self.pool.objset_id(name) {
            if self.in_use(id) {
                return Err(FsError::Invalid(format!(
                    "'{name}' is in use; unmount, unshare or unexport it before receiving \
                     into it"
                )));
            }
            // An instance nobody holds would show the old contents: forgotten.
            self.forget(id);
        }
        let summary = pool::send::receiver::receive_with(
            &self.pool,
            name,
            input,
            &|json| {
                Props::from_json(json)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
            resumable,
        );
        self.limits.refresh(&self.pool)?;
        Ok(summary?)
    }

    /// Destroys a snapshot; the space only it held comes back.
    /// Refused while it is held, or in use (mounted, or served as a LUN).
    pub fn destroy_snapshot(&self, full: &str) -> Result<()> {
        let id = self.snapshot_id(full)?;
        self.refuse_snapshot_in_use(id, full)?;
        self.forget(id);
        Ok(self.pool.snapshot_destroy(id)?)
    }

    fn refuse_snapshot_in_use(&self, id: u64, full: &str) -> Result<()> {
        if self.in_use(id) {
            return Err(FsError::Busy(format!(
                "'{full}' is in use (mounted or served as a LUN); stop serving it first"
            )));
        }
        Ok(())
    }

    /// Rolls the dataset back to its latest snapshot `full`. The dataset must not be
    /// open (mounted or shared) here.
    pub fn rollback(&self, full: &str) -> Result<()> {
        self.rollback_to(full, false)
    }

    /// Rolls the dataset back to its snapshot `full`; the snapshots after it are
    /// destroyed with it when `destroy_newer`, else they refuse it (named). A held
    /// newer snapshot refuses it either way. See `rollback_with` for a filesystem in
    /// use.
    pub fn rollback_to(&self, full: &str, destroy_newer: bool) -> Result<()> {
        self.rollback_with(full, destroy_newer, &mut |_, _| {})
            .map(|_| ())
    }

    /// `rollback_to`, for a filesystem in use too: a filesystem is rolled back through
    /// its open instance, in place, so whoever holds it (a share, a mount) keeps it;
    /// its operations pause for the rollback (`Filesystem::rollback_while_open`), and
    /// `vanished` is given it and its open files that no longer exist while they are
    /// still paused, so their protocol state goes first. Answers those files. A volume in use (served as a LUN) refuses: its initiator caches blocks
    /// a rollback would change under it.
    pub fn rollback_with(
        &self,
        full: &str,
        destroy_newer: bool,
        vanished: &mut dyn FnMut(&Filesystem, &[u64]),
    ) -> Result<Vec<u64>> {
        let id = self.snapshot_id(full)?;
        let (dataset, _) = self.split_snapshot(full)?;
        let (ds_id, _) = self.local(dataset)?;
        let volume_in_use = self
            .volumes
            .lock()
            .unwrap()
            .get(&ds_id)
            .is_some_and(|v| Arc::strong_count(v) > 1);
        if volume_in_use {
            return Err(FsError::Busy(format!(
                "'{dataset}' is served as a LUN; take it out of its target before rolling back"
            )));
        }
        // The newer snapshots go with the rollback: none may be in use, and their
        // instances are forgotten.
        if destroy_newer {
            let txg = |id| self.pool.snapshot_txg(id);
            let newer: Vec<(u64, String)> = self
                .pool
                .snapshot_names(ds_id)
                .into_iter()
                .filter(|(s, _)| txg(*s) > txg(id))
                .collect();
            for (snap, name) in &newer {
                self.refuse_snapshot_in_use(*snap, name)?;
            }
            for (snap, _) in newer {
                self.forget(snap);
            }
        }
        // One rollback at a time: a second one of the same filesystem would find its
        // gate closed.
        let _one = self.rollbacks.lock().unwrap();
        let gone = if self.is_volume(dataset)? {
            self.forget(ds_id);
            self.pool.snapshot_rollback_to(id, destroy_newer)?;
            Vec::new()
        } else {
            // Always through the open instance (opened here if need be), so a share or
            // mount that takes it meanwhile gets the rolled-back filesystem, never a
            // stale one.
            let fs = self.open(dataset)?;
            fs.rollback_while_open(id, destroy_newer, &mut |g| vanished(&fs, g))?
        };
        self.limits.refresh(&self.pool)?;
        Ok(gone)
    }

    /// Places hold `tag` on snapshot `full`: it cannot be destroyed (by hand, by a
    /// rollback or by schedule pruning) until released.
    pub fn hold(&self, full: &str, tag: &str) -> Result<()> {
        let id = self.snapshot_id(full)?;
        self.pool.snapshot_hold(id, tag).map_err(|e| match e {
            pool::PoolError::Exists(s) => FsError::Invalid(format!("{s}: already held")),
            e => e.into(),
        })
    }

    /// Releases hold `tag` of snapshot `full`.
    pub fn release(&self, full: &str, tag: &str) -> Result<()> {
        let id = self.snapshot_id(full)?;
        Ok(self.pool.snapshot_release(id, tag)?)
    }

    /// The holds of a snapshot (`pool/fs@name`), or of every snapshot of a dataset or
    /// of a pool (its root's name).
    pub fn holds_under(&self, of: &str) -> Result<Vec<HoldInfo>> {
        let dataset = of.split('@').next().unwrap_or(of);
        let filter = (dataset != self.pool.name).then_some(dataset);
        let mut out = Vec::new();
        for snap in self.snapshots(filter)? {
            if (of.contains('@') && snap.name != of) || snap.holds.is_empty() {
                continue;
            }
            out.extend(self.holds(&snap.name)?);
        }
        Ok(out)
    }

    /// Destroys the oldest snapshots of `dataset` named `dataset@<prefix>...` beyond
    /// the newest `keep`, never `spare`, never a held one (they count, but stay). The
    /// retention rule of replication and of snapshot schedules. Answers the snapshots
    /// destroyed and those that could not be (in use, being sent), with why.
    pub fn prune(
        &self,
        dataset: &str,
        prefix: &str,
        keep: usize,
        spare: Option<&str>,
    ) -> Result<Pruned> {
        let ours: Vec<(u64, String)> = self
            .snapshot_names(dataset)?
            .into_iter()
            .filter(|(_, n)| {
                n.split_once('@')
                    .is_some_and(|(_, short)| short.starts_with(prefix))
            })
            .collect();
        let excess = ours.len().saturating_sub(keep);
        let mut out = Pruned::default();
        for (id, name) in ours.into_iter().take(excess) {
            if Some(name.as_str()) == spare
                || self.pool.snapshot_holds(id).map_or(true, |h| !h.is_empty())
            {
                continue;
            }
            match self.destroy_snapshot(&name) {
                Ok(()) => out.destroyed.push(name),
                Err(e) => out.failed.push((name, e)),
            }
        }
        Ok(out)
    }

    /// The holds of snapshot `full`, by tag.
    pub fn holds(&self, full: &str) -> Result<Vec<HoldInfo>> {
        let id = self.snapshot_id(full)?;
        Ok(self
            .pool
            .snapshot_holds(id)?
            .into_iter()
            .map(|(tag, created_unix)| HoldInfo {
                snapshot: full.to_string(),
                tag,
                created_unix,
            })
            .collect())
    }

    /// Forgets the open instance of `name` (a dataset or snapshot), so it can be
    /// received into or rolled back. The caller has stopped every user of it (its
    /// share or mount); one still holding the instance sees the dataset as changed
    /// under it.
    pub fn close(&self, name: &str) {
        if let Some(id) = self.pool.objset_id(name) {
            self.forget(id);
        }
    }

    fn forget(&self, id: u64) {
        self.open.lock().unwrap().remove(&id);
        self.volumes.lock().unwrap().remove(&id);
    }

    /// Whether object set `id` is in use: open here, as a filesystem or a volume, and
    /// held by someone besides this cache (a share, a mount, a LUN, a caller). The
    /// one rule destroy and rollback refuse by, for both types; an instance only the
    /// cache holds is forgotten instead.
    fn in_use(&self, id: u64) -> bool {
        let filesystem = self.open.lock().unwrap().get(&id).map(Arc::strong_count);
        let volume = self.volumes.lock().unwrap().get(&id).map(Arc::strong_count);
        filesystem.unwrap_or(0) > 1 || volume.unwrap_or(0) > 1
    }

    /// Opens volume `name`, or a snapshot of one (`pool/vol@name`) read-only; opened
    /// once and shared.
    pub fn open_volume(&self, name: &str) -> Result<Arc<Volume>> {
        let (dataset, id) = match name.split_once('@') {
            Some((dataset, _)) => (dataset, self.snapshot_id(name)?),
            None => (name, self.local(name)?.0),
        };
        let (_, local) = self.local(dataset)?;
        let volsize = local.volsize.ok_or_else(|| {
            FsError::Invalid(format!("'{dataset}' is a filesystem, not a volume"))
        })?;
        let mut volumes = self.volumes.lock().unwrap();
        if let Some(v) = volumes.get(&id) {
            return Ok(v.clone());
        }
        let mut props = self.effective(dataset)?;
        if name.contains('@') {
            props.readonly = true;
        }
        let v = Volume::open(
            self.pool.clone(),
            id,
            name,
            volsize,
            props,
            self.limits.clone(),
        )?;
        volumes.insert(id, v.clone());
        Ok(v)
    }

    /// Opens a filesystem, or a snapshot of one (`pool/fs@name`) read-only.
    pub fn open(&self, name: &str) -> Result<Arc<Filesystem>> {
        if self.is_volume(name)? {
            return Err(FsError::Invalid(format!(
                "'{name}' is a volume, not a filesystem"
            )));
        }
        if name.contains('@') {
            let id = self.snapshot_id(name)?;
            let (dataset, _) = self.split_snapshot(name)?;
            let mut open = self.open.lock().unwrap();
            if let Some(fs) = open.get(&id) {
                return Ok(fs.clone());
            }
            let mut props = self.effective(dataset)?;
            props.readonly = true;
            props.atime = false;
            let fs = Filesystem::open(self.pool.clone(), id, name, props, self.limits.clone())?;
            open.insert(id, fs.clone());
            return Ok(fs);
        }
        let (id, _) = self.local(name)?;
        let mut open = self.open.lock().unwrap();
        if let Some(fs) = open.get(&id) {
            return Ok(fs.clone());
        }
        let fs = Filesystem::open(
            self.pool.clone(),
            id,
            name,
            self.effective(name)?,
            self.limits.clone(),
        )?;
        open.insert(id, fs.clone());
        Ok(fs)
    }
}

/// Whether a stream input has nothing more (streams follow one another until it ends).
fn input_ended(input: &mut dyn std::io::BufRead) -> Result<bool> {
    Ok(input
        .fill_buf()
        .map_err(|e| FsError::Io(format!("reading the stream: {e}")))?
        .is_empty())
}
