//! NFS file handles: opaque to clients, unforgeable, stable across restarts.
//!
//! Layout (41 bytes; NFSv3 allows 64):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version (1) |
//! | 1..9 | object set id of the dataset, u64 little-endian |
//! | 9..17 | object id, u64 LE |
//! | 17..25 | generation (the object's creation txg), u64 LE |
//! | 25..41 | MAC: the first 16 bytes of keyed BLAKE3 of bytes 0..25 under the pool's secret |
//!
//! A handle whose length, version or MAC is wrong was not made by this server (or the
//! secret changed): NFS3ERR_BADHANDLE. A well-formed handle whose object is gone or
//! whose generation no longer matches names a deleted file: NFS3ERR_STALE. Object ids
//! are never reused within a dataset and the generation is checked too, so a handle
//! can never reach an object other than the one it was made for. The secret lives in
//! the server's state directory, so handles survive restarts.
//!
//! A replica of another appliance's filesystem serves that appliance's handles: its
//! share carries the source's key and object set id (`service::HandleIdentity`), so a
//! client that fails over to the replica keeps its handles. Object ids and
//! generations travel unchanged in snapshot streams, which makes the rest equal.

pub const HANDLE_VERSION: u8 = 1;
pub const HANDLE_LEN: usize = 41;
const MAC_LEN: usize = 16;
const BODY_LEN: usize = HANDLE_LEN - MAC_LEN;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    pub objset: u64,
    pub object: u64,
    pub generation: u64,
}

/// Makes and checks handles under one secret.
#[derive(Clone)]
pub struct HandleKey {
    key: [u8; 32],
}

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    pub fn new(key: [u8; 32]) -> HandleKey {
        HandleKey { key }
    }

    fn mac(&self, body: &[u8]) -> [u8; MAC_LEN] {
        let h = blake3::keyed_hash(&self.key, body);
        h.as_bytes()[..MAC_LEN].try_into().unwrap()
    }

    pub fn encode(&self, id: FileId) -> [u8; HANDLE_LEN] {
        let mut h = [0u8; HANDLE_LEN];
        h[0] = HANDLE_VERSION;
        h[1..9].copy_from_slice(&id.objset.to_le_bytes());
        h[9..17].copy_from_slice(&id.object.to_le_bytes());
        h[17..25].copy_from_slice(&id.generation.to_le_bytes());
        let mac = self.mac(&h[..BODY_LEN]);
        h[BODY_LEN..].copy_from_slice(&mac);
        h
    }

    /// The file a handle names, if this server made it.
    pub fn decode(&self, h: &[u8]) -> Option<FileId> {
        if h.len() != HANDLE_LEN || h[0] != HANDLE_VERSION {
            return None;
        }
        let mac = self.mac(&h[..BODY_LEN]);
        // Constant-time comparison: timing must not reveal how much of a forged MAC
        // was right.
        let diff = mac
            .iter()
            .zip(&h[BODY_LEN..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return None;
        }
        Some(FileId {
            objset: u64::from_le_bytes(h[1..9].try_into().unwrap()),
            object: u64::from_le_bytes(h[9..17].try_into().unwrap()),
            generation: u64::from_le_bytes(h[17..25].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_resist_forgery() {
        let key = HandleKey::new([7; 32]);
        let id = FileId {
            objset: 3,
            object: 12345,
            generation: 99,
        };
        let h = key.encode(id);
        assert_eq!(key.decode(&h), Some(id));
        // Any changed byte, a different key, or a different length is refused.
        for i in 0..HANDLE_LEN {
            let mut bad = h;
            bad[i] ^= 1;
            assert_eq!(key.decode(&bad), None, "byte {i}");
        }
        assert_eq!(HandleKey::new([8; 32]).decode(&h), None);
        assert_eq!(key.decode(&h[..40]), None);
        assert_eq!(key.decode(&[]), None);
    }
}
