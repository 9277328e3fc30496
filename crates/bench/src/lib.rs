//! shoal bench: an NFSv3 load generator that drives many coordinated clients through
//! the classic storage workloads against any NFSv3 server, and, when the server is
//! shoal, sets the server's own counters beside the client's figures.
//!
//! Layout: `client` (the pipelined NFSv3 client), `data` (what is written and the
//! check of what is read), `job` (the job file), `workload` (what one client's
//! threads do), `agent` (agents and the controller that starts them at one instant),
//! `stats` (histograms and per-second series), `report` (aggregate, table, JSON, CSV,
//! HTML), `server_side` (shoal's /metrics before and after; the cache check), `plan`
//! (the capacity model of a pool layout).
//!
//! It speaks only NFS (and shoal's public HTTP API for the server's side): it never
//! depends on shoal's storage or daemon crates, so it measures any server alike.

pub mod agent;
pub mod client;
pub mod data;
pub mod job;
pub mod nfs4;
pub mod plan;
pub mod report;
pub mod server_side;
pub mod stats;
pub mod workload;
