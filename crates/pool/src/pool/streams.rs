//! What snapshot streams (`crate::send`) need from the pool: a snapshot's identity and
//! tree to send, and a received snapshot's identity to keep.

use super::*;

/// A snapshot as a stream writer reads it.
#[derive(Debug, Clone)]
pub struct SnapshotSource {
    /// `dataset@snapshot`
    pub name: String,
    pub dataset: u64,
    pub root: BlockPointer,
    pub txg: u64,
    pub guid: u64,
    pub props: String,
}

/// Keeps a snapshot from being destroyed while a stream is written from it.
pub struct SnapshotHold<'a> {
    pool: &'a Pool,
    id: u64,
}

impl Drop for SnapshotHold<'_> {
    fn drop(&mut self) {
        let mut sending = self.pool.sending.lock().unwrap();
        let n = sending.get_mut(&self.id).expect("held");
        *n -= 1;
        if *n == 0 {
            sending.remove(&self.id);
        }
    }
}

impl Pool {
    /// Holds snapshot `id` against destruction until the hold is dropped (checked
    /// under the same lock the destroy takes, so one or the other goes first).
    pub fn hold_snapshot(&self, id: u64) -> Result<SnapshotHold<'_>, PoolError> {
        let ds = self.datasets.read().unwrap();
        Self::snapshot_entry(&ds, id)?;
        *self.sending.lock().unwrap().entry(id).or_default() += 1;
        Ok(SnapshotHold { pool: self, id })
    }

    /// Snapshot `id` for sending.
    pub fn snapshot_source(&self, id: u64) -> Result<SnapshotSource, PoolError> {
        let ds = self.datasets.read().unwrap();
        let (s, dataset) = Self::snapshot_entry(&ds, id)?;
        Ok(SnapshotSource {
            name: s.name.clone(),
            dataset,
            root: s.objset.root_bp(),
            txg: s.snap_txg,
            guid: s.guid,
            props: s.props.clone(),
        })
    }

    /// A snapshot's identity, the same in every pool that received it.
    pub fn snapshot_guid(&self, id: u64) -> Option<u64> {
        let ds = self.datasets.read().unwrap();
        ds.get(&id)
            .filter(|d| d.snapshot_of.is_some())
            .map(|d| d.guid)
    }

    /// Takes a snapshot that keeps the identity `guid` a received stream gave it.
    pub(crate) fn snapshot_create_received(
        &self,
        dataset: u64,
        name: &str,
        guid: u64,
    ) -> Result<u64, PoolError> {
        Self::validate_objset_name(name)?;
        self.run_snapshot_op(SnapOp::Create {
            dataset,
            name: name.to_string(),
            guid: Some(guid),
        })
    }

    /// Raises the object id the next new object of `os` gets (a received stream keeps
    /// the sender's, so objects created later on a promoted replica never take an id
    /// the original gave to another file).
    pub(crate) fn next_object(&self, os: u64) -> Result<u64, PoolError> {
        Ok(self.objset(os)?.next_object())
    }

    pub(crate) fn raise_next_object(&self, os: u64, next: u64) -> Result<(), PoolError> {
        self.writable_objset(os)?.raise_next_object(next);
        Ok(())
    }
}
