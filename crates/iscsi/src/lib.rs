//! shoal's iSCSI target (RFC 7143): portals, login with text negotiation, CHAP and
//! mutual CHAP, CRC32C header and data digests, immediate and unsolicited data, R2T,
//! many commands in flight per session in CmdSN order, task management, discovery
//! (SendTargets), session reinstatement, ERL 0. It carries CDBs to the `scsi` crate's
//! logical units and never interprets one itself.
//!
//! Why written here: the transport is on the path of every block I/O; its threading,
//! copies and bounds decide the speed and robustness of the block service, and the
//! protocol rules (CmdSN window, residuals, R2T sequencing) are what initiators and
//! their conformance suites check.
//!
//! - `pdu.rs`: reading and writing PDUs, digests.
//! - `text.rs`: text keys. `params.rs`: operational negotiation. `chap.rs`: CHAP.
//! - `login.rs`: the login phase. `session.rs`: the full feature phase.
//! - `target.rs`: the targets offered. `server.rs`: portals, connections, workers.
//! - `initiator.rs`: a small initiator, for shoal's tools and tests.
//! - `fuzzing.rs`: the fuzz targets' checks, replayed in CI.

pub mod chap;
pub mod fuzzing;
pub mod initiator;
pub mod login;
pub mod params;
pub mod pdu;
pub mod server;
pub mod session;
pub mod target;
pub mod text;

pub use chap::Credential;
pub use server::Server;
pub use target::{DiscoveryAuth, Target, Targets};
