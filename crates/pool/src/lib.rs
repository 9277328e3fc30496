//! shoal's storage pool: block pointers, checksums, compression, allocation,
//! transaction groups, uberblocks, the ARC and object sets. It knows blocks and
//! objects, never NFS.

pub mod alloc;
pub mod arc;
pub mod blkptr;
pub mod checksum;
pub mod compress;
pub mod config;
pub mod deadlist;
pub mod dnode;
pub mod intent_log;
pub mod l2arc;
pub mod objset;
pub mod pool;
pub mod prefetch;
pub mod read_buf;
pub mod send;
pub mod spacelog;
pub mod storage;
pub mod uberblock;

pub use pool::{Pool, PoolOptions, PoolStatus, Tx, READ_AHEAD_PER_STREAM_BYTES};
pub use read_buf::ReadBuf;

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("I/O error: {0}")]
    Io(String),
    #[error("checksum error: {0}")]
    Checksum(String),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("out of space")]
    NoSpace,
    #[error("not found: {0}")]
    NotFound(String),
    #[error("already exists: {0}")]
    Exists(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("read-only: {0} is a snapshot")]
    ReadOnly(String),
    #[error("pool is suspended after an I/O failure: {0}")]
    Suspended(String),
    /// Another operation holds what this one needs (a resilver while a device is
    /// detached, say); trying again later may succeed.
    #[error("busy: {0}")]
    Busy(String),
}

impl From<std::io::Error> for PoolError {
    fn from(e: std::io::Error) -> Self {
        PoolError::Io(e.to_string())
    }
}
