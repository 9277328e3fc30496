//! The wire every program shares: XDR (RFC 4506), ONC RPC messages (RFC 5531), and
//! the TCP transport with record marking. Nothing here knows NFS.

pub mod rpc;
pub mod transport;
pub mod xdr;
