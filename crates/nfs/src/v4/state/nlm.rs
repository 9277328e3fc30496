//! NLM's side of the lock table: NFSv3 clients that lock through NLM ("hosts"),
//! their lock owners, and their DOS share reservations (NLM SHARE).
//!
//! NLM locks live in the same per-file range table as NFSv4 locks, so the two see
//! each other: a v3 lock conflicts with a v4 lock on the same range and the other
//! way round, and an NLM share reservation with an NFSv4 OPEN's share_deny. A host
//! is one client machine as NLM names it: the caller name it sends, at the address
//! it calls from. Its lock owners are its processes (the `svid`), one owner id per
//! (host, svid, file) as NFSv4 has one per (client, owner, file); an NLM owner
//! belongs to no open (`open` 0).
//!
//! Hosts have no lease. Their locks stay until unlocked, until the host says it
//! restarted (SM_NOTIFY from its status monitor, or FREE_ALL), or until this
//! server restarts, after which they reclaim them in the grace period. So
//! `expired` never counts a host as expired and courtesy never revokes NLM locks.

use super::*;
use std::net::IpAddr;

/// One NLM client machine.
pub struct NlmHost {
    /// The caller name it gives in its requests (its host name, or an address).
    pub name: String,
    pub addr: IpAddr,
    /// Its lock owners and share reservations, kept with them, so whether it
    /// holds anything is known without a scan of every owner and file.
    held: usize,
}

/// One NLM share reservation (SHARE): what the holder does with the file (`access`,
/// NFSv4's share_access bits) and what it denies others (`deny`, share_deny bits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlmShare {
    pub host: u64,
    pub owner: Vec<u8>,
    pub access: u32,
    pub deny: u32,
}

/// An NLM lock owner's key in `lock_owner_ids`: the svid, tagged so it can never
/// equal an NFSv4 owner of the same id (they are of different clients anyway).
fn svid_owner(svid: i32) -> Vec<u8> {
    let mut o = b"nlm-svid:".to_vec();
    o.extend_from_slice(&svid.to_be_bytes());
    o
}

/// The svid of an NLM lock owner's key (for TEST's holder), if it is one.
pub fn svid_of_owner(owner: &[u8]) -> Option<i32> {
    let rest = owner.strip_prefix(b"nlm-svid:")?;
    Some(i32::from_be_bytes(rest.try_into().ok()?))
}

impl V4State {
    pub fn is_nlm_host(&self, id: u64) -> bool {
        self.nlm_hosts.contains_key(&id)
    }

    /// The host calling from `addr` as `name`: found or made.
    pub fn nlm_host(&mut self, addr: IpAddr, name: &str) -> u64 {
        let key = (addr, name.to_string());
        if let Some(&id) = self.nlm_host_ids.get(&key) {
            return id;
        }
        let id = self.next_id();
        self.nlm_host_ids.insert(key, id);
        self.nlm_hosts.insert(
            id,
            NlmHost {
                name: name.to_string(),
                addr,
                held: 0,
            },
        );
        id
    }

    /// The host calling from `addr` as `name`, if it holds or asked for anything.
    pub fn find_nlm_host(&self, addr: IpAddr, name: &str) -> Option<u64> {
        self.nlm_host_ids.get(&(addr, name.to_string())).copied()
    }

    /// Hosts at `addr` (a restarted machine's locks go, whatever name it used).
    pub fn nlm_hosts_at(&self, addr: IpAddr) -> Vec<u64> {
        self.nlm_hosts
            .iter()
            .filter(|(_, h)| h.addr == addr)
            .map(|(id, _)| *id)
            .collect()
    }

    fn nlm_owner_id(&self, host: u64, svid: i32, file: FileKey) -> Option<u64> {
        self.lock_owner_ids
            .get(&(host, svid_owner(svid), file))
            .copied()
    }

    fn nlm_lock_owner(&mut self, host: u64, svid: i32, file: FileKey) -> u64 {
        if let Some(id) = self.nlm_owner_id(host, svid, file) {
            return id;
        }
        let id = self.next_id();
        let owner = svid_owner(svid);
        self.hold(host, 1);
        self.lock_owner_ids.insert((host, owner.clone(), file), id);
        self.lock_owners.insert(
            id,
            LockOwner {
                client: host,
                owner,
                file,
                open: 0,
                seqid: 0,
            },
        );
        id
    }

    /// Forgets an NLM lock owner that holds no range any more.
    fn drop_idle_nlm_owner(&mut self, id: u64) {
        let Some(l) = self.lock_owners.get(&id) else {
            return;
        };
        let file = l.file;
        if self
            .files
            .get(&file)
            .is_some_and(|f| f.ranges.iter().any(|r| r.lock == id))
        {
            return;
        }
        let l = self.lock_owners.remove(&id).expect("looked up above");
        self.hold(l.client, -1);
        self.lock_owner_ids.remove(&(l.client, l.owner, l.file));
        self.forget_file_if_idle(file);
    }

    /// Counts a lock owner or share reservation of `host` in (`1`) or out (`-1`).
    fn hold(&mut self, host: u64, change: isize) {
        let h = self
            .nlm_hosts
            .get_mut(&host)
            .expect("NLM state belongs to a host");
        h.held = h
            .held
            .checked_add_signed(change)
            .expect("a host never holds fewer than nothing");
    }

    /// Whether `host` holds a lock owner or a share reservation anywhere.
    pub fn nlm_host_holds(&self, host: u64) -> bool {
        self.nlm_hosts.get(&host).is_some_and(|h| h.held > 0)
    }

    /// LOCK for `svid` of `host`: the range is taken (replacing what the owner held
    /// there, as POSIX does), or the first conflicting holder is returned. Live NFSv4
    /// clients and other hosts conflict; an NFSv4 client whose lease ran out loses its
    /// state to this lock (`Release`s to run after letting go of the state lock).
    pub fn nlm_lock(
        &mut self,
        host: u64,
        svid: i32,
        file: FileKey,
        write: bool,
        start: u64,
        end: u64,
    ) -> (Result<(), Option<Denied>>, Vec<Release>) {
        debug_assert!(self.is_nlm_host(host), "NLM locks belong to hosts");
        let id = self.nlm_lock_owner(host, svid, file);
        let (r, released) = self.lock(id, write, start, end);
        let r = match r {
            Ok(_) => Ok(()),
            Err(Ok(denied)) => Err(Some(denied)),
            Err(Err(_)) => Err(None),
        };
        if r.is_err() {
            self.drop_idle_nlm_owner(id);
        }
        (r, released)
    }

    /// UNLOCK: releases [start, end) of the owner's ranges (nothing held is fine).
    pub fn nlm_unlock(&mut self, host: u64, svid: i32, file: FileKey, start: u64, end: u64) {
        let Some(id) = self.nlm_owner_id(host, svid, file) else {
            return;
        };
        if let Some(f) = self.files.get_mut(&file) {
            locks::cut(&mut f.ranges, &[id], start, end);
        }
        self.drop_idle_nlm_owner(id);
    }

    /// Whether `svid` of `host` holds exactly this range (a blocked lock's grant
    /// that its client turned down is undone only if nothing changed it since).
    pub fn nlm_holds(
        &self,
        host: u64,
        svid: i32,
        file: FileKey,
        write: bool,
        start: u64,
        end: u64,
    ) -> bool {
        let Some(id) = self.nlm_owner_id(host, svid, file) else {
            return false;
        };
        self.files.get(&file).is_some_and(|f| {
            f.ranges
                .iter()
                .any(|r| r.lock == id && r.write == write && r.start <= start && end <= r.end)
        })
    }

    /// TEST: who would stop this lock (the owner's own ranges never do).
    pub fn nlm_test(
        &self,
        host: u64,
        svid: i32,
        file: FileKey,
        write: bool,
        start: u64,
        end: u64,
    ) -> Option<Denied> {
        self.test_lock(file, host, &svid_owner(svid), write, start, end)
    }

    /// SHARE: a share reservation for `owner` of `host`, refused (`false`) when an
    /// NFSv4 open or another reservation is in its way. The owner's earlier
    /// reservation on the file is replaced.
    pub fn nlm_share(
        &mut self,
        host: u64,
        owner: &[u8],
        file: FileKey,
        access: u32,
        deny: u32,
    ) -> (bool, Vec<Release>) {
        let mut released = Vec::new();
        let holders = self.share_conflicts(file, host, owner, access, deny);
        if !holders.is_empty() && self.clear_expired(holders, &mut released).is_err() {
            return (false, released);
        }
        let f = self.file(file);
        let before = f.shares.len();
        f.shares.retain(|s| !(s.host == host && s.owner == owner));
        let replaced = f.shares.len() != before;
        f.shares.push(NlmShare {
            host,
            owner: owner.to_vec(),
            access,
            deny,
        });
        if !replaced {
            self.hold(host, 1);
        }
        (true, released)
    }

    /// UNSHARE: drops the owner's reservation on the file, if any.
    pub fn nlm_unshare(&mut self, host: u64, owner: &[u8], file: FileKey) {
        let removed = self.files.get_mut(&file).is_some_and(|f| {
            let before = f.shares.len();
            f.shares.retain(|s| !(s.host == host && s.owner == owner));
            f.shares.len() != before
        });
        if removed {
            self.hold(host, -1);
        }
        self.forget_file_if_idle(file);
    }

    /// Drops everything `host` holds, and the host (it restarted, or said FREE_ALL).
    pub fn forget_nlm_host(&mut self, host: u64) {
        let owners: Vec<u64> = self
            .lock_owners
            .iter()
            .filter(|(_, l)| l.client == host)
            .map(|(id, _)| *id)
            .collect();
        let mut files = Vec::new();
        for id in owners {
            if let Some(l) = self.lock_owners.remove(&id) {
                if let Some(f) = self.files.get_mut(&l.file) {
                    f.ranges.retain(|r| r.lock != id);
                }
                self.lock_owner_ids.remove(&(l.client, l.owner, l.file));
                files.push(l.file);
            }
        }
        let shared: Vec<FileKey> = self
            .files
            .iter()
            .filter(|(_, f)| f.shares.iter().any(|s| s.host == host))
            .map(|(k, _)| *k)
            .collect();
        for k in shared {
            if let Some(f) = self.files.get_mut(&k) {
                f.shares.retain(|s| s.host != host);
            }
            files.push(k);
        }
        for k in files {
            self.forget_file_if_idle(k);
        }
        if let Some(h) = self.nlm_hosts.remove(&host) {
            self.nlm_host_ids.remove(&(h.addr, h.name));
        }
    }

    /// How many ranges NLM hosts hold (for tests and status).
    pub fn nlm_ranges(&self) -> usize {
        self.files
            .values()
            .flat_map(|f| &f.ranges)
            .filter(|r| {
                self.lock_owners
                    .get(&r.lock)
                    .is_some_and(|l| self.is_nlm_host(l.client))
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(st: &mut V4State, last: u8) -> u64 {
        st.nlm_host(IpAddr::from([10, 0, 0, last]), &format!("host-{last}"))
    }

    #[test]
    fn nlm_locks_conflict_between_hosts_and_owners_and_go_with_their_host() {
        let mut st = V4State::new(1);
        let (a, b) = (host(&mut st, 1), host(&mut st, 2));
        let file = (9, 42);
        assert!(st.nlm_lock(a, 100, file, true, 0, 10).0.is_ok());
        // Another process of the same host conflicts (the server arbitrates).
        let denied = st
            .nlm_lock(a, 101, file, false, 5, 6)
            .0
            .unwrap_err()
            .unwrap();
        assert_eq!((denied.client, denied.offset, denied.length), (a, 0, 10));
        assert_eq!(svid_of_owner(&denied.owner), Some(100));
        assert!(
            st.nlm_lock(b, 100, file, true, 10, 20).0.is_ok(),
            "no overlap"
        );
        // The same owner re-locking replaces its own range (downgrade).
        assert!(st.nlm_lock(a, 100, file, false, 0, 10).0.is_ok());
        assert!(
            st.nlm_test(b, 7, file, false, 0, 10).is_none(),
            "shared now"
        );
        assert!(st.nlm_test(b, 7, file, true, 0, 10).is_some());
        // A host with no lease never expires: its lock is not revoked for another.
        st.set_lease(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(2));
        assert!(st.nlm_lock(b, 7, file, true, 0, 1).0.is_err());
        st.forget_nlm_host(a);
        assert!(st.nlm_lock(b, 7, file, true, 0, 1).0.is_ok());
        st.nlm_unlock(b, 7, file, 0, u64::MAX);
        st.nlm_unlock(b, 100, file, 0, u64::MAX);
        assert_eq!(st.nlm_ranges(), 0);
        assert!(st.files.is_empty(), "an idle file is forgotten");
        assert!(
            st.lock_owners.is_empty(),
            "owners without ranges are forgotten"
        );
    }

    #[test]
    fn a_refused_lock_leaves_no_owner_behind() {
        let mut st = V4State::new(1);
        let (a, b) = (host(&mut st, 1), host(&mut st, 2));
        assert!(st.nlm_lock(a, 1, (1, 1), true, 0, u64::MAX).0.is_ok());
        for svid in 0..100 {
            assert!(st.nlm_lock(b, svid, (1, 1), true, 0, 1).0.is_err());
        }
        assert_eq!(st.lock_owners.len(), 1);
    }

    #[test]
    fn nlm_shares_deny_each_other() {
        let mut st = V4State::new(1);
        let (a, b) = (host(&mut st, 1), host(&mut st, 2));
        let file = (3, 4);
        assert!(st.nlm_share(a, b"oh-a", file, SHARE_READ, SHARE_WRITE).0);
        assert!(
            !st.nlm_share(b, b"oh-b", file, SHARE_WRITE, 0).0,
            "write denied"
        );
        assert!(
            st.nlm_share(b, b"oh-b", file, SHARE_READ, 0).0,
            "read allowed"
        );
        st.nlm_unshare(a, b"oh-a", file);
        assert!(st.nlm_share(b, b"oh-c", file, SHARE_WRITE, 0).0);
    }
}
