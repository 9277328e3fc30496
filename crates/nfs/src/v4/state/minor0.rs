//! NFSv4.0's state of `V4State`: open and lock owners' sequences (the last answer
//! of each, which a retransmission gets again), the callback path of a 4.0 client
//! (probed, then a session-like record of minor 0), RENEW and RELEASE_LOCKOWNER.
//! The operations themselves are in `v4::minor0`.

use super::*;

impl V4State {
    /// An NFSv4.0 owner's request `seqid` ran and was answered `reply`.
    pub fn record_sequence(
        &mut self,
        owner: OwnerKey,
        seqid: u32,
        reply: Arc<Vec<u8>>,
        fh: Option<crate::v4::pseudo::Fh>,
        closed: Option<[u8; 12]>,
    ) {
        if self.owner_seqs.len() >= MAX_OWNER_SEQS && !self.owner_seqs.contains_key(&owner) {
            self.owner_seqs.retain(|_, s| s.closed.is_none());
        }
        self.owner_seqs.insert(
            owner,
            OwnerSeq {
                seqid,
                reply: Some(reply),
                fh,
                closed,
            },
        );
    }

    /// The answer to a CLOSE of `other` with `seqid` that already ran, for the
    /// client at `peer` sending it again.
    pub fn closed_replay(
        &self,
        other: &[u8; 12],
        seqid: u32,
        peer: std::net::IpAddr,
    ) -> Option<Arc<Vec<u8>>> {
        self.owner_seqs.iter().find_map(|(k, s)| {
            let mine = self.clients.get(&k.client).is_some_and(|c| c.peer == peer);
            (mine && s.closed.as_ref() == Some(other) && s.seqid == seqid)
                .then(|| s.reply.clone())
                .flatten()
        })
    }

    /// A 4.0 client's callback path `path` answered its probe: unless the client
    /// has named another path since (a later SETCLIENTID), it gets a session-like
    /// record (minor 0, no slots: nothing can SEQUENCE on it) whose back channel is
    /// `conn`, so delegations are handed to it and recalled as a 4.1 client's are.
    pub fn open_callback40(
        &mut self,
        client: u64,
        conn: Arc<dyn crate::transport::BackChannel>,
        path: Callback40,
    ) {
        let current = self
            .clients
            .get(&client)
            .is_some_and(|c| c.confirmed && c.callback40 == Some(path));
        if !current {
            return;
        }
        self.close_callback40(client);
        let id = self.new_session_id();
        self.sessions.insert(
            id,
            Session {
                client,
                slots: Vec::new(),
                max_ops: 0,
                max_request: 0,
                max_response: 0,
                max_response_cached: 0,
                back: Some(BackChan {
                    conn,
                    program: path.1,
                    slot: Arc::new(std::sync::Mutex::new(0)),
                }),
                minor: 0,
                cb_cred: Some(crate::rpc::Credential::Sys(crate::rpc::AuthSys {
                    stamp: 0,
                    machine: b"shoal".to_vec(),
                    uid: 0,
                    gid: 0,
                    gids: Vec::new(),
                })),
                cb_ident: path.2,
            },
        );
        if let Some(c) = self.clients.get_mut(&client) {
            c.callback40_up = Some((id, path));
        }
    }

    /// Drops a 4.0 client's callback record: no new delegations until a probe of
    /// its (new) path answers.
    pub fn close_callback40(&mut self, client: u64) {
        if let Some((id, _)) = self
            .clients
            .get_mut(&client)
            .and_then(|c| c.callback40_up.take())
        {
            self.sessions.remove(&id);
        }
    }

    /// The callback record of a 4.0 client (`open_callback40`), if its path works.
    pub fn callback40_of(&self, client: u64) -> Option<[u8; 16]> {
        self.clients
            .get(&client)
            .and_then(|c| c.callback40_up.map(|(id, _)| id))
    }

    /// Whether a probe of `client`'s callback path should start now: it has one, it
    /// is not already up on that path, no probe of it is under way, and fewer than
    /// `MAX_PROBES` are. Marks it under way.
    pub fn start_probe40(&mut self, client: u64) -> Option<Callback40> {
        let under_way = self.clients.values().filter(|c| c.probing).count();
        let c = self.clients.get_mut(&client)?;
        let path = c.callback40?;
        if c.probing || c.callback40_up.is_some_and(|(_, p)| p == path) || under_way >= MAX_PROBES {
            return None;
        }
        c.probing = true;
        Some(path)
    }

    /// A probe of `client`'s path ended (answered or not).
    pub fn end_probe40(&mut self, client: u64) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.probing = false;
        }
    }

    /// An NFSv4.0 operation naming client ID `clientid` from `peer`: a confirmed
    /// client of that address, whose lease it renews; STALE_CLIENTID otherwise.
    pub fn renew_minor0(&mut self, clientid: u64, peer: std::net::IpAddr) -> OpResult<()> {
        match self.clients.get_mut(&clientid) {
            Some(c) if c.confirmed && c.peer == peer => {
                c.renewed = Instant::now();
                Ok(())
            }
            _ => Err(Nfs4Error::StaleClientId),
        }
    }

    /// RELEASE_LOCKOWNER: the NFSv4.0 lock owner `owner` of `client` and its lock
    /// stateids go, unless it still holds a lock.
    pub fn release_lock_owner(&mut self, client: u64, owner: &[u8]) -> OpResult<()> {
        let ids: Vec<u64> = self
            .lock_owners
            .iter()
            .filter(|(_, l)| l.client == client && l.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        let held = ids.iter().any(|id| {
            let file = self.lock_owners[id].file;
            self.files
                .get(&file)
                .is_some_and(|f| f.ranges.iter().any(|r| r.lock == *id))
        });
        if held {
            return Err(Nfs4Error::LocksHeld);
        }
        for id in ids {
            self.free_lock(id)?;
        }
        self.owner_seqs.remove(&OwnerKey::lock(client, owner));
        Ok(())
    }
}
