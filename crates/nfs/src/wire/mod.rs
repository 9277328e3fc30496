//! The wire every program shares: XDR (RFC 4506), ONC RPC messages (RFC 5531), and
//! the TCP transport with record marking, and UDP for the small programs. Nothing
//! here knows NFS.

pub mod rpc;
pub mod transport;
pub mod udp;
pub mod xdr;
