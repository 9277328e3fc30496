//! shoal's NFS service: ONC RPC over TCP (record marking, many calls in flight per
//! connection), the project's own XDR codec, MOUNT v3, NFSv3 (RFC 1813, all 22
//! procedures), NFSv4.1 and 4.2 (RFC 8881, RFC 7862) on the same port, a minimal
//! portmapper, file handles that cannot be forged, and export rules with AUTH_SYS
//! checks. It serves `fs` filesystems and never touches a device.
//!
//! Layout, one folder a protocol layer:
//! - `wire/`: what every program shares: the XDR codec, ONC RPC headers, the TCP
//!   server and a small client.
//! - `service.rs`: the one RPC service: the share table, handle resolution under the
//!   export rules, refusals and analytics, and the dispatch by program and version.
//! - `v3/`: NFSv3 procedures, MOUNT v3 and their wire types; `portmap.rs` beside it.
//! - `v4/`: NFSv4.1/4.2: COMPOUND dispatch, client and session state, opens, locks,
//!   attributes and the pseudo-filesystem (see its module comment).
//! - `nlm/`: NLM v1/3/4 (NFSv3 clients' locks, in the same lock table as NFSv4's)
//!   and the status monitor's restart notifications (NSM).
//! - `handle` the file handles; `exports` the client rules; `names` the share and
//!   file names analytics shows; `fuzzing` the harness of the fuzz targets.

pub mod client_names;
pub mod exports;
pub mod fuzzing;
pub mod handle;
pub mod names;
pub mod nlm;
mod portmap;
pub mod service;
pub mod v3;
pub mod v4;
pub mod wire;

// The wire modules by their short names, as the rest of the workspace uses them.
pub use v3::proto;
pub use wire::{rpc, transport, xdr};

pub use exports::ExportRules;
pub use handle::HandleKey;
pub use service::{HandleIdentity, NfsService, Share, ShareInfo};
pub use transport::{RpcClient, RpcServer};
pub use v4::state::Nfs4Status;
