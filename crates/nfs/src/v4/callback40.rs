//! NFSv4.0's callback path (RFC 7530 sections 10.2 and 16.33): the server calls the
//! client's callback program at the address SETCLIENTID gave, on a connection the
//! server opens itself (4.1 calls back on the client's own connection instead).
//!
//! Once a 4.0 client is confirmed, CB_NULL probes its address from a thread of its
//! own; only when that is answered does the client get a session-like record with
//! this channel as its back channel (`V4State::open_callback40`), and with it
//! delegations: a client whose callback address cannot be reached never holds one,
//! so no other client waits a lease for a recall that cannot arrive. A recall is
//! CB_COMPOUND of minor version 0 with the client's callback_ident and CB_RECALL
//! alone (no CB_SEQUENCE: 4.0 has no sessions).
//!
//! Bounds: one connection a client, opened when a call needs it and again after it
//! fails; every call waits at most its timeout.

use crate::transport::{read_reply_record, BackChannel, LAST_FRAGMENT};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

/// How long the CB_NULL probe waits.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client's callback address from SETCLIENTID: an RPC universal address
/// (`h1.h2.h3.h4.p1.p2`, or an IPv6 address and `.p1.p2`) for netid `tcp` or
/// `tcp6`. Anything else (UDP, RDMA, a malformed address) is no usable path.
pub fn parse_callback_address(netid: &[u8], r_addr: &[u8]) -> Option<SocketAddr> {
    if !matches!(netid, b"tcp" | b"tcp6") {
        return None;
    }
    let text = std::str::from_utf8(r_addr).ok()?;
    let (rest, lo) = text.rsplit_once('.')?;
    let (host, hi) = rest.rsplit_once('.')?;
    let port = hi.parse::<u8>().ok()? as u16 * 256 + lo.parse::<u8>().ok()? as u16;
    let ip: IpAddr = host.parse().ok()?;
    (port != 0).then_some(SocketAddr::new(ip, port))
}

/// A channel to a 4.0 client's callback service: one TCP connection, opened on
/// demand.
pub struct OutboundChannel {
    addr: SocketAddr,
    conn: Mutex<Option<TcpStream>>,
    next_xid: std::sync::atomic::AtomicU32,
}

impl OutboundChannel {
    pub fn new(addr: SocketAddr) -> OutboundChannel {
        OutboundChannel {
            addr,
            conn: Mutex::new(None),
            next_xid: std::sync::atomic::AtomicU32::new(std::process::id().wrapping_mul(7919)),
        }
    }

    fn exchange(
        stream: &mut TcpStream,
        xid: u32,
        record: &[u8],
        timeout: Duration,
    ) -> std::io::Result<Vec<u8>> {
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mark = (LAST_FRAGMENT | record.len() as u32).to_be_bytes();
        stream.write_all(&mark)?;
        stream.write_all(record)?;
        loop {
            let reply = read_reply_record(stream)?;
            if reply.len() >= 4 && reply[..4] == xid.to_be_bytes() {
                return Ok(reply);
            }
        }
    }
}

impl BackChannel for OutboundChannel {
    fn call(&self, call: &dyn Fn(u32) -> Vec<u8>, timeout: Duration) -> std::io::Result<Vec<u8>> {
        let xid = self
            .next_xid
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let record = call(xid);
        let mut conn = self.conn.lock().unwrap();
        // A connection kept from an earlier call may have been closed by the client
        // meanwhile: one more try on a new one.
        for attempt in 0..2 {
            let stream = match conn.as_mut() {
                Some(s) => s,
                None => {
                    let s = TcpStream::connect_timeout(&self.addr, timeout)?;
                    s.set_nodelay(true)?;
                    conn.insert(s)
                }
            };
            match OutboundChannel::exchange(stream, xid, &record, timeout) {
                Ok(reply) => return Ok(reply),
                Err(e) => {
                    *conn = None;
                    if attempt == 1 {
                        return Err(e);
                    }
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// The path is known good from the probe; a call that fails says so itself.
    fn is_open(&self) -> bool {
        true
    }
}

/// CB_NULL to `program` version 1 over `channel`: whether it was answered.
pub fn probe(channel: &OutboundChannel, program: u32) -> bool {
    let record =
        |xid: u32| crate::rpc::encode_call(xid, program, 1, 0, &crate::rpc::Credential::None).buf;
    match channel.call(&record, PROBE_TIMEOUT) {
        Ok(reply) => reply.len() >= 24 && reply[8..12] == [0, 0, 0, 0] && reply[20..24] == [0; 4],
        Err(e) => {
            tracing::info!(address = %channel.addr, "NFSv4.0 callback path down (CB_NULL): {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn universal_addresses_parse_and_the_rest_is_no_path() {
        assert_eq!(
            parse_callback_address(b"tcp", b"10.99.0.2.3.213"),
            Some("10.99.0.2:981".parse().unwrap())
        );
        assert_eq!(
            parse_callback_address(b"tcp6", b"fd00::2.8.1"),
            Some("[fd00::2]:2049".parse().unwrap())
        );
        for (netid, addr) in [
            (&b"udp"[..], &b"10.0.0.1.8.1"[..]),
            (b"tcp", b"10.0.0.1.8"),
            (b"tcp", b"10.0.0.1.0.0"),
            (b"tcp", b"10.0.0.1.300.1"),
            (b"tcp", b"host.example.8.1"),
            (b"tcp", b"\xff"),
        ] {
            assert_eq!(parse_callback_address(netid, addr), None, "{addr:?}");
        }
    }
}
