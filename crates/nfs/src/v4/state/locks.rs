//! The byte-range lock table of `V4State`: lock owners, POSIX conflicts, split and
//! merge of ranges, LOCK, LOCKT, LOCKU and RELEASE_LOCKOWNER's state.

use super::*;

impl V4State {
    /// The lock owner `owner` of `client` on the open `open`'s file: found or made.
    pub fn lock_owner(&mut self, client: u64, owner: &[u8], open: u64) -> OpResult<u64> {
        let file = self.opens.get(&open).ok_or(Nfs4Error::BadStateId)?.file;
        let key = (client, owner.to_vec(), file);
        if let Some(&id) = self.lock_owner_ids.get(&key) {
            return Ok(id);
        }
        let id = self.next_id();
        self.lock_owner_ids.insert(key, id);
        self.opens
            .get_mut(&open)
            .expect("checked above")
            .locks
            .push(id);
        self.lock_owners.insert(
            id,
            LockOwner {
                client,
                owner: owner.to_vec(),
                file,
                open,
                seqid: 0,
            },
        );
        Ok(id)
    }

    fn conflicts(
        &self,
        file: FileKey,
        lock: u64,
        write: bool,
        start: u64,
        end: u64,
    ) -> Vec<(Range, u64)> {
        let Some(f) = self.files.get(&file) else {
            return Vec::new();
        };
        let me = self.lock_owners.get(&lock);
        f.ranges
            .iter()
            .filter(|r| r.start < end && start < r.end && (write || r.write))
            .filter_map(|r| {
                let holder = self.lock_owners.get(&r.lock)?;
                // The same owner never conflicts with itself (POSIX: a lock replaces).
                let same = me.is_some_and(|m| m.client == holder.client && m.owner == holder.owner);
                (!same).then(|| (r.clone(), holder.client))
            })
            .collect()
    }

    fn denied_of(&self, r: &Range) -> Denied {
        let holder = self
            .lock_owners
            .get(&r.lock)
            .expect("ranges belong to lock owners");
        Denied {
            offset: r.start,
            length: if r.end == u64::MAX {
                u64::MAX
            } else {
                r.end - r.start
            },
            write: r.write,
            client: holder.client,
            owner: holder.owner.clone(),
        }
    }

    /// LOCK: takes [start, end) for `lock` (shared or exclusive), replacing what the
    /// owner held there (upgrade, downgrade, split and merge as POSIX does).
    pub fn lock(
        &mut self,
        lock: u64,
        write: bool,
        start: u64,
        end: u64,
    ) -> (Result<u32, Result<Denied, Nfs4Error>>, Vec<Release>) {
        let mut released = Vec::new();
        let Some(file) = self.lock_owners.get(&lock).map(|l| l.file) else {
            return (Err(Err(Nfs4Error::BadStateId)), released);
        };
        let found = self.conflicts(file, lock, write, start, end);
        if !found.is_empty() {
            let holders: Vec<u64> = found.iter().map(|(_, c)| *c).collect();
            if self.clear_expired(holders, &mut released).is_err() {
                let again = self.conflicts(file, lock, write, start, end);
                if let Some((r, _)) = again.first() {
                    return (Err(Ok(self.denied_of(r))), released);
                }
            }
        }
        if !self.lock_owners.contains_key(&lock) {
            // Its own client was purged as expired meanwhile: cannot happen for the
            // caller's client, which just renewed, but stay safe.
            return (Err(Err(Nfs4Error::BadStateId)), released);
        }
        // An owner has one lock owner id per file (`lock_owner_ids`): its ranges
        // here are this id's.
        let same_owner = [lock];
        let f = self.file(file);
        if f.ranges.len() >= MAX_LOCKS_PER_FILE {
            return (Err(Err(Nfs4Error::Delay)), released);
        }
        cut(&mut f.ranges, &same_owner, start, end);
        f.ranges.push(Range {
            lock,
            write,
            start,
            end,
        });
        merge(&mut f.ranges, lock);
        let l = self.lock_owners.get_mut(&lock).expect("checked above");
        l.seqid = l.seqid.wrapping_add(1).max(1);
        (Ok(l.seqid), released)
    }

    /// LOCKT: who would stop this lock, if anyone (expired holders do not count).
    pub fn test_lock(
        &self,
        file: FileKey,
        client: u64,
        owner: &[u8],
        write: bool,
        start: u64,
        end: u64,
    ) -> Option<Denied> {
        let f = self.files.get(&file)?;
        let now = Instant::now();
        f.ranges
            .iter()
            .filter(|r| r.start < end && start < r.end && (write || r.write))
            .find(|r| {
                let h = &self.lock_owners[&r.lock];
                let mine = h.client == client && h.owner == owner;
                !mine && !self.expired(h.client, now)
            })
            .map(|r| self.denied_of(r))
    }

    /// LOCKU: releases [start, end) of the owner's ranges on the file.
    pub fn unlock(&mut self, lock: u64, start: u64, end: u64) -> OpResult<u32> {
        let file = self
            .lock_owners
            .get(&lock)
            .ok_or(Nfs4Error::BadStateId)?
            .file;
        let f = self.file(file);
        cut(&mut f.ranges, &[lock], start, end);
        self.forget_file_if_idle(file);
        let l = self.lock_owners.get_mut(&lock).expect("checked above");
        l.seqid = l.seqid.wrapping_add(1).max(1);
        Ok(l.seqid)
    }

    /// FREE_STATEID of a lock stateid: only when it holds no range.
    pub fn free_lock(&mut self, lock: u64) -> OpResult<()> {
        let file = self
            .lock_owners
            .get(&lock)
            .ok_or(Nfs4Error::BadStateId)?
            .file;
        if self
            .files
            .get(&file)
            .is_some_and(|f| f.ranges.iter().any(|r| r.lock == lock))
        {
            return Err(Nfs4Error::LocksHeld);
        }
        if let Some(owner) = self.lock_owners.remove(&lock) {
            self.lock_owner_ids
                .remove(&(owner.client, owner.owner, owner.file));
            if let Some(o) = self.opens.get_mut(&owner.open) {
                o.locks.retain(|l| *l != lock);
            }
        }
        Ok(())
    }
}

/// Removes [start, end) from every range of `owners`, splitting ranges that stick out
/// on both sides.
pub(super) fn cut(ranges: &mut Vec<Range>, owners: &[u64], start: u64, end: u64) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.drain(..) {
        if !owners.contains(&r.lock) || r.end <= start || end <= r.start {
            out.push(r);
            continue;
        }
        if r.start < start {
            out.push(Range {
                end: start,
                ..r.clone()
            });
        }
        if end < r.end {
            out.push(Range { start: end, ..r });
        }
    }
    *ranges = out;
}

/// Joins touching or overlapping ranges of `lock` of the same type.
pub(super) fn merge(ranges: &mut Vec<Range>, lock: u64) {
    let (mut mine, mut rest): (Vec<Range>, Vec<Range>) =
        ranges.drain(..).partition(|r| r.lock == lock);
    mine.sort_by_key(|r| (r.write, r.start));
    let mut merged: Vec<Range> = Vec::with_capacity(mine.len());
    for r in mine {
        match merged.last_mut() {
            Some(m) if m.write == r.write && r.start <= m.end => m.end = m.end.max(r.end),
            _ => merged.push(r),
        }
    }
    rest.extend(merged);
    *ranges = rest;
}
