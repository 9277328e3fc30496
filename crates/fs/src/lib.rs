//! shoal filesystems and volumes on a pool: datasets with inherited properties, volumes
//! (runs of blocks a block protocol serves as disks), POSIX objects
//! (files, directories, symlinks, hard links, special files, xattrs) with stable ids and
//! generation numbers, hashed directories with stable cookies. It speaks no wire
//! protocol: the FUSE mount and the NFS server are its clients.
//!
//! Every change that touches more than one object (create, link, rename, unlink) runs
//! inside one pool transaction (`pool::Tx`), so a crash keeps all of it or none of it.

pub mod attr;
pub mod datasets;
pub mod dir;
pub mod filesystem;
pub mod props;
pub mod space;
pub mod volume;

pub use attr::{Attr, Kind, SetAttr, Timespec};
pub use datasets::{pool_of, DatasetInfo, DatasetType, Datasets, HoldInfo, VolumeSpec};
pub use filesystem::{Cred, DirEntry, Filesystem, StatFs};
pub use props::{EffectiveProps, Props};
pub use volume::{Durability, Volume};

use pool::PoolError;

/// A filesystem error; every variant maps to one errno so both FUSE and NFS can answer.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory{0}")]
    NotFound(String),
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("file name too long")]
    NameTooLong,
    #[error("no space left on the pool")]
    NoSpace,
    #[error("quota exceeded")]
    Quota,
    #[error("read-only filesystem")]
    ReadOnly,
    #[error("no such attribute")]
    NoAttr,
    #[error("attribute value too large for the buffer")]
    Range,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooBig,
    #[error("cross-device link")]
    CrossDevice,
    #[error("I/O error: {0}")]
    Io(String),
    /// Something holds what the request would change (a held snapshot, a snapshot
    /// being sent); it may succeed once that ends.
    #[error("busy: {0}")]
    Busy(String),
    /// A dataset of one type named where the other was asked for (a volume given to
    /// a filesystem command, or the reverse).
    #[error("{name} is a {is}, not a {}", is.other())]
    WrongType {
        name: String,
        is: datasets::DatasetType,
    },
}

impl FsError {
    /// The errno this error is reported as.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound(_) => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Access => libc::EACCES,
            FsError::Perm => libc::EPERM,
            FsError::Invalid(_) | FsError::WrongType { .. } => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::NoSpace => libc::ENOSPC,
            FsError::Quota => libc::EDQUOT,
            FsError::ReadOnly => libc::EROFS,
            FsError::NoAttr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::TooBig => libc::EFBIG,
            FsError::CrossDevice => libc::EXDEV,
            FsError::Io(_) => libc::EIO,
            FsError::Busy(_) => libc::EBUSY,
        }
    }
}

impl From<PoolError> for FsError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::NoSpace => FsError::NoSpace,
            PoolError::NotFound(s) => FsError::NotFound(format!(": {s}")),
            PoolError::Exists(_) => FsError::Exists,
            PoolError::InvalidArgument(s) => FsError::Invalid(s),
            PoolError::ReadOnly(_) => FsError::ReadOnly,
            PoolError::Busy(s) => FsError::Busy(s),
            other => FsError::Io(other.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, FsError>;
