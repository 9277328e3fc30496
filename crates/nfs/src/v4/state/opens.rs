//! The opens of `V4State`: OPEN (a new open state, or the owner's upgraded), its
//! share reservations against every other open and NLM share (a conflict with a
//! client whose lease ran out revokes that client's state), CLOSE, OPEN_DOWNGRADE
//! (only to modes the owner opened), and whether I/O without open state may go
//! ahead.

use super::*;

impl V4State {
    pub(super) fn file(&mut self, key: FileKey) -> &mut FileState {
        self.files.entry(key).or_default()
    }

    pub(super) fn forget_file_if_idle(&mut self, key: FileKey) {
        if self
            .files
            .get(&key)
            .is_some_and(|f| f.opens.is_empty() && f.ranges.is_empty() && f.shares.is_empty())
        {
            self.files.remove(&key);
        }
    }

    /// Clients (other than `client` with `owner`) whose opens, and NLM hosts whose
    /// share reservations, conflict with this share request.
    pub(super) fn share_conflicts(
        &self,
        key: FileKey,
        client: u64,
        owner: &[u8],
        access: u32,
        deny: u32,
    ) -> Vec<u64> {
        let Some(f) = self.files.get(&key) else {
            return Vec::new();
        };
        let nlm = f
            .shares
            .iter()
            .filter(|s| !(s.host == client && s.owner == owner))
            .filter(|s| s.deny & access != 0 || s.access & deny != 0)
            .map(|s| s.host);
        f.opens
            .iter()
            .filter_map(|id| self.opens.get(id))
            .filter(|o| !(o.client == client && o.owner == owner))
            .filter(|o| o.deny & access != 0 || o.access & deny != 0)
            .map(|o| o.client)
            .chain(nlm)
            .collect()
    }

    /// Settles conflicts with clients whose lease ran out by dropping their state
    /// (courtesy ends when someone else needs what they hold). `Err(())` when a live
    /// client still conflicts.
    pub(super) fn clear_expired(
        &mut self,
        holders: Vec<u64>,
        released: &mut Vec<Release>,
    ) -> Result<(), ()> {
        let now = Instant::now();
        let mut live = false;
        for c in holders {
            if self.expired(c, now) {
                tracing::info!(client = c, "lease expired and conflicting: state revoked");
                released.extend(self.revoke_state(c));
            } else {
                live = true;
            }
        }
        if live {
            Err(())
        } else {
            Ok(())
        }
    }

    /// OPEN: a new open state, or the owner's existing one upgraded. Returns the open's
    /// id and its new seqid; `Release`s of clients whose expired state was in the way.
    pub fn open(
        &mut self,
        client: u64,
        owner: &[u8],
        key: FileKey,
        access: u32,
        deny: u32,
        fs: &Arc<Filesystem>,
    ) -> (OpResult<(u64, u32)>, Vec<Release>) {
        let mut released = Vec::new();
        let holders = self.share_conflicts(key, client, owner, access, deny);
        if !holders.is_empty() && self.clear_expired(holders, &mut released).is_err() {
            return (Err(Nfs4Error::ShareDenied), released);
        }
        let existing = self.files.get(&key).and_then(|f| {
            f.opens.iter().copied().find(|id| {
                self.opens
                    .get(id)
                    .is_some_and(|o| o.client == client && o.owner == owner)
            })
        });
        if let Some(id) = existing {
            let o = self.opens.get_mut(&id).expect("listed opens exist");
            o.access |= access;
            o.deny |= deny;
            o.modes |= mode_bit(access, deny);
            o.seqid = o.seqid.wrapping_add(1).max(1);
            return (Ok((id, o.seqid)), released);
        }
        let id = self.next_id();
        self.opens.insert(
            id,
            Open {
                client,
                owner: owner.to_vec(),
                file: key,
                seqid: 1,
                access,
                deny,
                modes: mode_bit(access, deny),
                fs: fs.clone(),
                locks: Vec::new(),
            },
        );
        self.file(key).opens.push(id);
        fs.opened(key.1);
        (Ok((id, 1)), released)
    }

    /// Removes an open and its lock owners; the file is released by the caller.
    pub(super) fn drop_open(&mut self, id: u64) -> Option<Release> {
        let o = self.opens.remove(&id)?;
        for &l in &o.locks {
            if let Some(owner) = self.lock_owners.remove(&l) {
                self.lock_owner_ids
                    .remove(&(owner.client, owner.owner, owner.file));
            }
            if let Some(f) = self.files.get_mut(&o.file) {
                f.ranges.retain(|r| r.lock != l);
            }
        }
        if let Some(f) = self.files.get_mut(&o.file) {
            f.opens.retain(|x| *x != id);
        }
        self.forget_file_if_idle(o.file);
        Some(Release {
            fs: o.fs,
            ino: o.file.1,
        })
    }

    pub fn close(&mut self, id: u64) -> OpResult<Vec<Release>> {
        let o = self.opens.get(&id).ok_or(Nfs4Error::BadStateId)?;
        let holds_locks = self
            .files
            .get(&o.file)
            .is_some_and(|f| f.ranges.iter().any(|r| o.locks.contains(&r.lock)));
        if holds_locks {
            return Err(Nfs4Error::LocksHeld);
        }
        Ok(self.drop_open(id).into_iter().collect())
    }

    pub fn downgrade(&mut self, id: u64, access: u32, deny: u32) -> OpResult<u32> {
        let o = self.opens.get_mut(&id).ok_or(Nfs4Error::BadStateId)?;
        if access & !o.access != 0 || deny & !o.deny != 0 || access == 0 {
            return Err(Nfs4Error::Inval);
        }
        // The pairs asked for that fit inside the new one must make it up exactly:
        // an open only ever asked for BOTH cannot go down to READ.
        let within = (0..16u32)
            .filter(|b| o.modes & (1 << b) != 0)
            .map(|b| (b >> 2, b & 3))
            .filter(|(a, d)| a & !access == 0 && d & !deny == 0);
        let (a, d) = within.fold((0, 0), |(ua, ud), (a, d)| (ua | a, ud | d));
        if (a, d) != (access, deny) {
            return Err(Nfs4Error::Inval);
        }
        o.modes = (0..16u32)
            .filter(|b| o.modes & (1 << b) != 0 && (b >> 2) & !access == 0 && (b & 3) & !deny == 0)
            .fold(0, |m, b| m | 1 << b);
        o.access = access;
        o.deny = deny;
        o.seqid = o.seqid.wrapping_add(1).max(1);
        Ok(o.seqid)
    }

    /// Whether an I/O without open state (the anonymous stateids) may go ahead:
    /// nobody's open denies it.
    pub fn anonymous_allowed(&mut self, key: FileKey, write: bool) -> (bool, Vec<Release>) {
        let want = if write { SHARE_WRITE } else { SHARE_READ };
        let holders = self.share_conflicts(key, 0, &[], want, 0);
        let mut released = Vec::new();
        let ok = holders.is_empty() || self.clear_expired(holders, &mut released).is_ok();
        (ok, released)
    }
}
