//! NFSv4.1 and 4.2 (RFC 8881, RFC 7862) on the same port and service as NFSv3.
//!
//! A v4 call is one COMPOUND: a list of operations run in order against a current
//! (and a saved) file handle until one fails. Files:
//! - `compound.rs`: decoding a COMPOUND, the rules on which operations may start one,
//!   SEQUENCE and the session's slot (reply cache), and the dispatch of every operation.
//! - `session.rs`: the session operations (EXCHANGE_ID, CREATE_SESSION,
//!   DESTROY_SESSION, BIND_CONN_TO_SESSION, DESTROY_CLIENTID, RECLAIM_COMPLETE).
//! - `state.rs`: the server's memory of clients, sessions, opens (share reservations)
//!   and byte-range locks, with their stateids and leases; pure logic, no I/O.
//! - the operations on files and directories, one file a kind: `handles.rs` (PUTFH,
//!   LOOKUP, SECINFO), `attributes.rs` (GETATTR, SETATTR, VERIFY, ACCESS),
//!   `namespace.rs` (CREATE, REMOVE, RENAME, LINK, READDIR, READLINK), `opens.rs`
//!   (OPEN, CLOSE, OPEN_DOWNGRADE), `io.rs` (READ, WRITE, COMMIT, SEEK, DEALLOCATE,
//!   COPY), `locks.rs` (LOCK, LOCKT, LOCKU, TEST_STATEID, FREE_STATEID).
//! - `delegations.rs`: read delegations, DELEGRETURN and their recall (CB_RECALL).
//! - `recovery.rs`: the client list for the grace period after a restart.
//! - `attrs.rs`: the attribute bitmaps, fattr4 encoding, settable attributes, owners.
//! - `pseudo.rs`: the pseudo-filesystem that joins the shared datasets under `/`.
//!
//! Invariants: a COMPOUND never touches a file its client's export rules refuse (every
//! handle is resolved through the same `NfsService::target` as NFSv3); a stateid is
//! checked against the file it is used on; state lives only in memory, so a restart
//! makes every client establish a new client ID and session (its old stateids answer
//! BAD_STATEID), and unflushed data is never lost because WRITE and COMMIT have the
//! same durability as NFSv3's.

pub(crate) mod attributes;
pub(crate) mod attrs;
pub(crate) mod callback40;
pub mod client;
pub(crate) mod compound;
pub(crate) mod delegations;
pub(crate) mod handles;
pub(crate) mod io;
pub(crate) mod locks;
pub(crate) mod minor0;
pub(crate) mod namespace;
pub(crate) mod opens;
pub(crate) mod pseudo;
pub(crate) mod recovery;
pub(crate) mod session;
pub(crate) mod state;

/// The minor versions served: 4.0 (`minor0.rs`), 4.1 and 4.2.
pub const MINOR_MIN: u32 = 0;
pub const MINOR_MAX: u32 = 2;
/// Largest file handle of NFSv4 (RFC 8881 section 4.2.1).
pub const FHSIZE4: usize = 128;
/// NFS4_OPAQUE_LIMIT
pub const OPAQUE_LIMIT: usize = 1024;
/// Operations of one COMPOUND; more are refused (TOO_MANY_OPS) before any runs.
pub const MAX_OPS: usize = 64;
/// Slots of one session's fore channel.
pub const MAX_SLOTS: u32 = 64;
/// The lease in seconds: state of a client that sends no SEQUENCE for this long may be
/// released when another client conflicts with it.
pub const LEASE_SECONDS: u32 = 90;

/// Operation numbers (RFC 8881 section 16.2.1, RFC 7862 section 15).
pub mod op {
    pub const ACCESS: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const COMMIT: u32 = 5;
    pub const CREATE: u32 = 6;
    pub const DELEGPURGE: u32 = 7;
    pub const DELEGRETURN: u32 = 8;
    pub const GETATTR: u32 = 9;
    pub const GETFH: u32 = 10;
    pub const LINK: u32 = 11;
    pub const LOCK: u32 = 12;
    pub const LOCKT: u32 = 13;
    pub const LOCKU: u32 = 14;
    pub const LOOKUP: u32 = 15;
    pub const LOOKUPP: u32 = 16;
    pub const NVERIFY: u32 = 17;
    pub const OPEN: u32 = 18;
    pub const OPENATTR: u32 = 19;
    pub const OPEN_CONFIRM: u32 = 20;
    pub const OPEN_DOWNGRADE: u32 = 21;
    pub const PUTFH: u32 = 22;
    pub const PUTPUBFH: u32 = 23;
    pub const PUTROOTFH: u32 = 24;
    pub const READ: u32 = 25;
    pub const READDIR: u32 = 26;
    pub const READLINK: u32 = 27;
    pub const REMOVE: u32 = 28;
    pub const RENAME: u32 = 29;
    pub const RENEW: u32 = 30;
    pub const RESTOREFH: u32 = 31;
    pub const SAVEFH: u32 = 32;
    pub const SECINFO: u32 = 33;
    pub const SETATTR: u32 = 34;
    pub const SETCLIENTID: u32 = 35;
    pub const SETCLIENTID_CONFIRM: u32 = 36;
    pub const VERIFY: u32 = 37;
    pub const WRITE: u32 = 38;
    pub const RELEASE_LOCKOWNER: u32 = 39;
    pub const BACKCHANNEL_CTL: u32 = 40;
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const FREE_STATEID: u32 = 45;
    pub const GET_DIR_DELEGATION: u32 = 46;
    pub const GETDEVICEINFO: u32 = 47;
    pub const GETDEVICELIST: u32 = 48;
    pub const LAYOUTCOMMIT: u32 = 49;
    pub const LAYOUTGET: u32 = 50;
    pub const LAYOUTRETURN: u32 = 51;
    pub const SECINFO_NO_NAME: u32 = 52;
    pub const SEQUENCE: u32 = 53;
    pub const SET_SSV: u32 = 54;
    pub const TEST_STATEID: u32 = 55;
    pub const WANT_DELEGATION: u32 = 56;
    pub const DESTROY_CLIENTID: u32 = 57;
    pub const RECLAIM_COMPLETE: u32 = 58;
    pub const ALLOCATE: u32 = 59;
    pub const COPY: u32 = 60;
    pub const COPY_NOTIFY: u32 = 61;
    pub const DEALLOCATE: u32 = 62;
    pub const IO_ADVISE: u32 = 63;
    pub const LAYOUTERROR: u32 = 64;
    pub const LAYOUTSTATS: u32 = 65;
    pub const OFFLOAD_CANCEL: u32 = 66;
    pub const OFFLOAD_STATUS: u32 = 67;
    pub const READ_PLUS: u32 = 68;
    pub const SEEK: u32 = 69;
    pub const WRITE_SAME: u32 = 70;
    pub const CLONE: u32 = 71;
    pub const ILLEGAL: u32 = 10044;

    /// The name analytics and logs give an operation.
    pub fn name(op: u32) -> &'static str {
        const NAMES: [&str; 72] = [
            "illegal",
            "illegal",
            "illegal",
            "access",
            "close",
            "commit",
            "create",
            "delegpurge",
            "delegreturn",
            "getattr",
            "getfh",
            "link",
            "lock",
            "lockt",
            "locku",
            "lookup",
            "lookupp",
            "nverify",
            "open",
            "openattr",
            "open_confirm",
            "open_downgrade",
            "putfh",
            "putpubfh",
            "putrootfh",
            "read",
            "readdir",
            "readlink",
            "remove",
            "rename",
            "renew",
            "restorefh",
            "savefh",
            "secinfo",
            "setattr",
            "setclientid",
            "setclientid_confirm",
            "verify",
            "write",
            "release_lockowner",
            "backchannel_ctl",
            "bind_conn_to_session",
            "exchange_id",
            "create_session",
            "destroy_session",
            "free_stateid",
            "get_dir_delegation",
            "getdeviceinfo",
            "getdevicelist",
            "layoutcommit",
            "layoutget",
            "layoutreturn",
            "secinfo_no_name",
            "sequence",
            "set_ssv",
            "test_stateid",
            "want_delegation",
            "destroy_clientid",
            "reclaim_complete",
            "allocate",
            "copy",
            "copy_notify",
            "deallocate",
            "io_advise",
            "layouterror",
            "layoutstats",
            "offload_cancel",
            "offload_status",
            "read_plus",
            "seek",
            "write_same",
            "clone",
        ];
        NAMES.get(op as usize).copied().unwrap_or("illegal")
    }
}

/// nfsstat4 values this server answers (RFC 8881 section 15.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Nfs4Error {
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    NxIo = 6,
    Access = 13,
    Exist = 17,
    XDev = 18,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    RoFs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    BadHandle = 10001,
    BadCookie = 10003,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
    Delay = 10008,
    Same = 10009,
    Denied = 10010,
    Expired = 10011,
    Locked = 10012,
    Grace = 10013,
    ShareDenied = 10015,
    WrongSec = 10016,
    ClidInUse = 10017,
    Resource = 10018,
    Moved = 10019,
    NoFileHandle = 10020,
    MinorVersMismatch = 10021,
    StaleClientId = 10022,
    StaleStateId = 10023,
    OldStateId = 10024,
    BadStateId = 10025,
    BadSeqId = 10026,
    NotSame = 10027,
    LockRange = 10028,
    Symlink = 10029,
    RestoreFh = 10030,
    AttrNotSupp = 10032,
    NoGrace = 10033,
    ReclaimBad = 10034,
    BadXdr = 10036,
    LocksHeld = 10037,
    OpenMode = 10038,
    BadOwner = 10039,
    BadName = 10041,
    BadRange = 10042,
    OpIllegal = 10044,
    FileOpen = 10046,
    AdminRevoked = 10047,
    BadSession = 10052,
    BadSlot = 10053,
    CompleteAlready = 10054,
    ConnNotBoundToSession = 10055,
    SeqMisordered = 10063,
    SequencePos = 10064,
    ReqTooBig = 10065,
    RepTooBig = 10066,
    RepTooBigToCache = 10067,
    RetryUncachedRep = 10068,
    TooManyOps = 10070,
    OpNotInSession = 10071,
    ClientIdBusy = 10074,
    SeqFalseRetry = 10076,
    BadHighSlot = 10077,
    DeadSession = 10078,
    NotOnlyOp = 10081,
    WrongCred = 10082,
    WrongType = 10083,
}

impl From<&fs::FsError> for Nfs4Error {
    fn from(e: &fs::FsError) -> Nfs4Error {
        use fs::FsError as F;
        match e {
            F::NotFound(_) => Nfs4Error::NoEnt,
            F::Exists => Nfs4Error::Exist,
            F::NotDir => Nfs4Error::NotDir,
            F::IsDir => Nfs4Error::IsDir,
            F::NotEmpty => Nfs4Error::NotEmpty,
            F::Access => Nfs4Error::Access,
            F::Perm => Nfs4Error::Perm,
            F::Invalid(_) | F::WrongType { .. } | F::NoAttr | F::Range => Nfs4Error::Inval,
            F::NameTooLong => Nfs4Error::NameTooLong,
            F::NoSpace => Nfs4Error::NoSpc,
            F::Quota => Nfs4Error::DQuot,
            F::ReadOnly => Nfs4Error::RoFs,
            F::TooManyLinks => Nfs4Error::MLink,
            F::TooBig => Nfs4Error::FBig,
            F::CrossDevice => Nfs4Error::XDev,
            F::Io(_) => Nfs4Error::Io,
            F::Busy(_) => Nfs4Error::Delay,
        }
    }
}

impl From<fs::FsError> for Nfs4Error {
    fn from(e: fs::FsError) -> Nfs4Error {
        Nfs4Error::from(&e)
    }
}

impl From<crate::proto::Status> for Nfs4Error {
    /// The v3 status a shared check answered (handle and export checks), in v4 terms.
    fn from(s: crate::proto::Status) -> Nfs4Error {
        use crate::proto::Status as S;
        match s {
            S::Perm => Nfs4Error::Perm,
            S::NoEnt => Nfs4Error::NoEnt,
            S::Acces => Nfs4Error::Access,
            S::Exist => Nfs4Error::Exist,
            S::XDev => Nfs4Error::XDev,
            S::NotDir => Nfs4Error::NotDir,
            S::IsDir => Nfs4Error::IsDir,
            S::Inval => Nfs4Error::Inval,
            S::FBig => Nfs4Error::FBig,
            S::NoSpc => Nfs4Error::NoSpc,
            S::RoFs => Nfs4Error::RoFs,
            S::MLink => Nfs4Error::MLink,
            S::NameTooLong => Nfs4Error::NameTooLong,
            S::NotEmpty => Nfs4Error::NotEmpty,
            S::DQuot => Nfs4Error::DQuot,
            S::Stale => Nfs4Error::Stale,
            S::BadHandle => Nfs4Error::BadHandle,
            S::BadCookie => Nfs4Error::BadCookie,
            S::NotSupp => Nfs4Error::NotSupp,
            S::TooSmall => Nfs4Error::TooSmall,
            S::BadType => Nfs4Error::BadType,
            S::Jukebox => Nfs4Error::Delay,
            S::Io | S::NxIo | S::NotSync | S::ServerFault | S::Ok => Nfs4Error::Io,
        }
    }
}

/// The result of one operation: `Err` ends the COMPOUND with that status.
pub type OpResult<T = ()> = Result<T, Nfs4Error>;
