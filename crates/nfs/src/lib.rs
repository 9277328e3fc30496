//! shoal's NFS service: ONC RPC over TCP (record marking, many calls in flight per
//! connection), the project's own XDR codec, MOUNT v3, NFSv3 (RFC 1813, all 22
//! procedures), a minimal portmapper, file handles that cannot be forged, and export
//! rules with AUTH_SYS checks. It serves `fs` filesystems and never touches a device.
//!
//! Layout: `xdr` and `rpc` are the wire; `transport` the TCP server and a small
//! client; `proto` the NFSv3 types; `handle` the file handles; `exports` the client
//! rules; `service` the programs themselves; `names` the share and file names
//! analytics shows; `fuzzing` the harness of the fuzz target.

pub mod exports;
pub mod fuzzing;
pub mod handle;
pub mod names;
pub mod proto;
pub mod rpc;
pub mod service;
pub mod transport;
pub mod xdr;

pub use exports::ExportRules;
pub use handle::HandleKey;
pub use service::{NfsService, Share, ShareInfo};
pub use transport::{RpcClient, RpcServer};
