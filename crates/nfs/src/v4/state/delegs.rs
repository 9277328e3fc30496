//! The delegation table of `V4State`: granting read and write delegations, finding
//! the ones in the way of an access (recalling them, revoking those a lease past
//! their recall), DELEGRETURN. The rules of who may hold what are in `super`'s module
//! comment; the recalls themselves go out from `v4::delegations`, after the state
//! lock is let go.

use super::*;

impl V4State {
    /// Publishes the number of delegations after a change to them.
    fn delegs_changed(&self) {
        self.deleg_count
            .store(self.delegs.len(), std::sync::atomic::Ordering::Release);
    }

    fn add_deleg(&mut self, id: u64, d: Deleg) {
        self.delegs_by_file.entry(d.file).or_default().push(id);
        *self.delegs_by_client.entry(d.client).or_insert(0) += 1;
        self.delegs.insert(id, d);
        self.delegs_changed();
    }

    pub(super) fn remove_deleg(&mut self, id: u64) -> Option<Deleg> {
        let d = self.delegs.remove(&id)?;
        if let std::collections::hash_map::Entry::Occupied(mut ids) =
            self.delegs_by_file.entry(d.file)
        {
            ids.get_mut().retain(|x| *x != id);
            if ids.get().is_empty() {
                ids.remove();
            }
        }
        if let std::collections::hash_map::Entry::Occupied(mut n) =
            self.delegs_by_client.entry(d.client)
        {
            *n.get_mut() -= 1;
            if *n.get() == 0 {
                n.remove();
            }
        }
        self.delegs_changed();
        Some(d)
    }

    /// The delegations `client` holds (a scan: only when a client goes away).
    pub(super) fn delegs_of(&self, client: u64) -> Vec<u64> {
        self.delegs
            .iter()
            .filter(|(_, d)| d.client == client)
            .map(|(id, _)| *id)
            .collect()
    }

    /// The delegations of `file`.
    fn delegs_on(&self, file: FileKey) -> impl Iterator<Item = (u64, &Deleg)> {
        self.delegs_by_file
            .get(&file)
            .into_iter()
            .flatten()
            .map(|id| (*id, &self.delegs[id]))
    }

    /// A client's live back channel, if any of its sessions has one.
    fn back_of(&self, client: u64) -> Option<([u8; 16], &BackChan)> {
        self.sessions.iter().find_map(|(id, s)| {
            let b = s.back.as_ref()?;
            (s.client == client && b.conn.is_open()).then_some((*id, b))
        })
    }

    /// Where to call back about a delegation `session` of `client` got: that
    /// session's live back channel, else any of the client's.
    fn back_for(&self, client: u64, session: Option<[u8; 16]>) -> Option<([u8; 16], &BackChan)> {
        session
            .and_then(|id| {
                let s = self.sessions.get(&id)?;
                let b = s.back.as_ref()?;
                (s.client == client && b.conn.is_open()).then_some((id, b))
            })
            .or_else(|| self.back_of(client))
    }

    /// Whether `session` (of `client`) can be called back itself.
    fn session_callable(&self, client: u64, session: Option<[u8; 16]>) -> bool {
        session
            .and_then(|id| self.sessions.get(&id))
            .is_some_and(|s| {
                s.client == client
                    && s.cb_cred.is_some()
                    && s.back.as_ref().is_some_and(|b| b.conn.is_open())
            })
    }

    /// Whether some of the client's delegations cannot be recalled: it holds some and
    /// none of its sessions has a live back channel (SEQUENCE says CB_PATH_DOWN).
    pub fn callback_path_down(&self, client: u64) -> bool {
        self.delegs_by_client.contains_key(&client) && self.back_of(client).is_none()
    }

    /// Whether some open of `file` is as `f` asks.
    fn any_open_of(&self, file: FileKey, f: impl Fn(&Open) -> bool) -> bool {
        self.files
            .get(&file)
            .is_some_and(|fl| fl.opens.iter().filter_map(|id| self.opens.get(id)).any(f))
    }

    /// A read delegation for a read-only open, when it is safe: the client can be
    /// called back, nobody has the file open for writing, no delegation of it is
    /// being recalled, and the client holds none of it yet.
    pub fn grant_read_deleg(
        &mut self,
        client: u64,
        session: Option<[u8; 16]>,
        file: FileKey,
        fh: &[u8],
    ) -> Option<Stateid> {
        if !self.session_callable(client, session) {
            return None;
        }
        let writers = self.any_open_of(file, |o| {
            o.access & SHARE_WRITE != 0 || o.deny & SHARE_READ != 0
        });
        let busy = self
            .delegs_on(file)
            .any(|(_, d)| d.recalled.is_some() || d.client == client || d.write);
        if writers
            || busy
            || self.locked_by_others(file, client)
            || self.delegs.len() >= MAX_DELEGATIONS
        {
            return None;
        }
        Some(self.hand_out(Deleg {
            client,
            file,
            fh: fh.to_vec(),
            recalled: None,
            write: false,
            owner: Vec::new(),
            session,
        }))
    }

    /// A write delegation for an open with write access, when it is safe: the client
    /// can be called back, every open of the file is this open owner's (nobody else
    /// reads or writes it through open state, and no other cache of the same client
    /// takes locks at the server that the holder's cache would not see), and no
    /// delegation of the file exists.
    pub fn grant_write_deleg(
        &mut self,
        client: u64,
        session: Option<[u8; 16]>,
        owner: &[u8],
        file: FileKey,
        fh: &[u8],
    ) -> Option<Stateid> {
        if !self.may_hold_alone(client, session, file, Some(owner))
            || self.delegs.len() >= MAX_DELEGATIONS
        {
            return None;
        }
        Some(self.hand_out(Deleg {
            client,
            file,
            fh: fh.to_vec(),
            recalled: None,
            write: true,
            owner: owner.to_vec(),
            session,
        }))
    }

    /// Whether anyone but `client` holds a byte-range lock or an NLM share on `file`.
    /// A delegation's holder locks in its own cache without asking (the Linux client
    /// does), so it would never meet those: no delegation while they exist. Locks
    /// taken later recall the delegation first (`break_delegations`).
    fn locked_by_others(&self, file: FileKey, client: u64) -> bool {
        self.files.get(&file).is_some_and(|f| {
            !f.shares.is_empty()
                || f.ranges.iter().any(|r| {
                    self.lock_owners
                        .get(&r.lock)
                        .is_none_or(|l| l.client != client)
                })
        })
    }

    /// Whether `client` may hold a delegation of `file` that nobody else's is in the
    /// way of: `session` can be called back, no delegation of the file exists, and
    /// every open of it is the client's (and, given `owner`, that open owner's).
    fn may_hold_alone(
        &self,
        client: u64,
        session: Option<[u8; 16]>,
        file: FileKey,
        owner: Option<&[u8]>,
    ) -> bool {
        self.session_callable(client, session)
            && !self.delegs_by_file.contains_key(&file)
            && !self.locked_by_others(file, client)
            && !self.any_open_of(file, |o| {
                o.client != client || owner.is_some_and(|w| o.owner != w)
            })
    }

    /// The delegation a client held before the server restarted, reclaimed with its
    /// open (CLAIM_PREVIOUS naming a delegation type): given again, as RFC 8881
    /// 18.16.3 asks, so the client's cache (and the locks it kept there) stays
    /// covered. When it could not be handed out now (no back channel to this
    /// session, another delegation of the file, or another owner's open in the way
    /// of a write delegation) it is given already recalled: the answer's recall
    /// flag tells the client to write back, send its locks and return it. The
    /// stateid and that flag.
    pub fn reclaim_deleg(
        &mut self,
        client: u64,
        session: Option<[u8; 16]>,
        owner: &[u8],
        file: FileKey,
        fh: &[u8],
        write: bool,
    ) -> (Stateid, bool) {
        let clean = self.may_hold_alone(client, session, file, write.then_some(owner));
        let stateid = self.hand_out(Deleg {
            client,
            file,
            fh: fh.to_vec(),
            recalled: (!clean).then(Instant::now),
            write,
            owner: owner.to_vec(),
            session,
        });
        (stateid, !clean)
    }

    /// Records `d` under a new id: its stateid.
    fn hand_out(&mut self, d: Deleg) -> Stateid {
        let id = self.next_id();
        self.add_deleg(id, d);
        self.stateid_of(id, 1)
    }

    /// Delegations of `file` in the way of a change to it (by anyone; `holder`: a
    /// client whose own delegation, once recalled, is not in its way, so it can
    /// write back what it cached). Ones not yet recalled are marked and returned to
    /// be recalled; ones recalled over a lease ago are revoked. `true` when none is
    /// left in the way.
    pub fn break_delegations(&mut self, file: FileKey, holder: Option<u64>) -> (bool, Vec<Recall>) {
        // The holder's own write delegation allows its changes; its recalled read
        // delegation no longer stands in its way either.
        let ids: Vec<u64> = self
            .delegs_on(file)
            .filter(|(_, d)| !(Some(d.client) == holder && (d.write || d.recalled.is_some())))
            .map(|(id, _)| id)
            .collect();
        self.recall_or_revoke(ids)
    }

    /// Write delegations of `file` in the way of a read of it by anyone but `holder`
    /// (who may read what it writes): as `break_delegations`.
    pub fn break_write_delegations(
        &mut self,
        file: FileKey,
        holder: Option<u64>,
    ) -> (bool, Vec<Recall>) {
        let ids: Vec<u64> = self
            .delegs_on(file)
            .filter(|(_, d)| d.write && Some(d.client) != holder)
            .map(|(id, _)| id)
            .collect();
        self.recall_or_revoke(ids)
    }

    /// Delegations of `file` in the way of an OPEN by `owner` of `client`: as
    /// `break_delegations` for an open that writes (or denies reads) and as
    /// `break_write_delegations` for one that reads, and besides, the client's own
    /// write delegation when another of its owners opens, unless the open claims
    /// the delegation (CLAIM_DELEGATE_CUR: the holder handing its opens over).
    pub fn break_for_open(
        &mut self,
        file: FileKey,
        client: u64,
        owner: &[u8],
        writes: bool,
        claims_delegation: bool,
    ) -> (bool, Vec<Recall>) {
        let ids: Vec<u64> = self
            .delegs_on(file)
            .filter(|(_, d)| {
                if d.client != client {
                    d.write || writes
                } else if d.write {
                    !claims_delegation && d.owner != owner
                } else {
                    writes && d.recalled.is_none()
                }
            })
            .map(|(id, _)| id)
            .collect();
        self.recall_or_revoke(ids)
    }

    /// Recalls the delegations `ids` not yet recalled and revokes the ones recalled
    /// over a lease ago; `true` when none of them is left.
    fn recall_or_revoke(&mut self, ids: Vec<u64>) -> (bool, Vec<Recall>) {
        let now = Instant::now();
        let mut recalls = Vec::new();
        let mut clear = true;
        for id in ids {
            let (client, recalled, fh, granted_on) = {
                let d = &self.delegs[&id];
                (d.client, d.recalled, d.fh.clone(), d.session)
            };
            match recalled {
                Some(at) if now.saturating_duration_since(at) > self.lease => {
                    tracing::info!(client, "delegation not returned within the lease: revoked");
                    self.remove_deleg(id);
                    let other = self.stateid_of(id, 0).other;
                    self.revoke(other, client);
                }
                Some(_) => clear = false,
                None => {
                    clear = false;
                    self.delegs.get_mut(&id).expect("listed").recalled = Some(now);
                    // Without a way to call it, the client has a lease to notice
                    // CB_PATH_DOWN and return the delegation, else it is revoked.
                    if let Some((session, b)) = self.back_for(client, granted_on) {
                        let sess = &self.sessions[&session];
                        recalls.push(Recall {
                            back: (b.conn.clone(), b.program, b.slot.clone()),
                            minor: sess.minor,
                            cred: sess.cb_cred.clone().unwrap_or(crate::rpc::Credential::None),
                            ident: sess.cb_ident,
                            session,
                            stateid: self.stateid_of(id, 1),
                            fh,
                        });
                    }
                }
            }
        }
        (clear, recalls)
    }

    /// DELEGRETURN.
    pub fn delegreturn(&mut self, id: u64, client: u64, file: FileKey) -> OpResult<()> {
        match self.delegs.get(&id) {
            Some(d) if d.client == client && d.file == file => {
                self.remove_deleg(id);
                Ok(())
            }
            _ => Err(Nfs4Error::BadStateId),
        }
    }
}
