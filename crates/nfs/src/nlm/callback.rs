//! Calls from the server to a client machine's own RPC services: NLM's GRANTED
//! (a blocked lock is now held), the _RES answers of the asynchronous _MSG calls,
//! and NSM's SM_NOTIFY (this server restarted). Each looks the service up in the
//! client's portmapper first (version 2 GETPORT, as every client's rpcbind answers).
//!
//! Bounds: every call has a timeout (`CALL_TIMEOUT`); a UDP call is sent at most
//! `UDP_TRIES` times. These run on threads of their own, never on a worker that
//! holds a client's call.

use crate::rpc::{self, AuthSys, Credential};
use crate::transport::read_reply_record;
use crate::xdr::{Decoder, Encoder};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
const UDP_TRIES: u32 = 3;
const PORTMAP_PROGRAM: u32 = 100000;
const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;

/// Which transport a call goes over: the one the client's own call came on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

/// The credentials of the server's calls: root of this machine.
fn credential() -> Credential {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    Credential::Sys(AuthSys {
        stamp: 0,
        machine: host.trim().as_bytes().to_vec(),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    })
}

/// The results of an accepted, successful reply (after its header).
fn results(xid: u32, reply: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = |what: &str| std::io::Error::other(format!("RPC reply: {what}"));
    let mut d = Decoder::new(reply);
    let parse = |d: &mut Decoder<'_>| -> Result<(), String> {
        let got = d.u32().map_err(|e| e.to_string())?;
        if got != xid {
            return Err(format!("xid {got}, not {xid}"));
        }
        if d.u32().map_err(|e| e.to_string())? != rpc::MSG_REPLY {
            return Err("not a reply".into());
        }
        if d.u32().map_err(|e| e.to_string())? != 0 {
            return Err("denied".into());
        }
        d.u32().map_err(|e| e.to_string())?;
        d.opaque(400).map_err(|e| e.to_string())?;
        match d.u32().map_err(|e| e.to_string())? {
            0 => Ok(()),
            s => Err(format!("not accepted ({s})")),
        }
    };
    parse(&mut d).map_err(|e| bad(&e))?;
    Ok(d.rest().to_vec())
}

fn next_xid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static XID: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(2_654_435_761);
    base.wrapping_add(XID.fetch_add(1, Ordering::Relaxed))
}

/// One call to `addr`; `wait`: read the reply and return its results (else the call
/// is only sent, as the _RES messages are, which get no useful reply).
pub fn call(
    addr: SocketAddr,
    proto: Proto,
    program: u32,
    version: u32,
    procedure: u32,
    args: &[u8],
    wait: bool,
) -> std::io::Result<Option<Vec<u8>>> {
    let xid = next_xid();
    let mut e = rpc::encode_call(xid, program, version, procedure, &credential());
    e.buf.extend_from_slice(args);
    match proto {
        Proto::Tcp => {
            let mut s = TcpStream::connect_timeout(&addr, CALL_TIMEOUT)?;
            s.set_read_timeout(Some(CALL_TIMEOUT))?;
            s.set_write_timeout(Some(CALL_TIMEOUT))?;
            s.set_nodelay(true)?;
            let mark = (crate::transport::LAST_FRAGMENT | e.buf.len() as u32).to_be_bytes();
            s.write_all(&mark)?;
            s.write_all(&e.buf)?;
            if !wait {
                return Ok(None);
            }
            loop {
                let reply = read_reply_record(&mut s)?;
                if reply.len() >= 4 && reply[..4] == xid.to_be_bytes() {
                    return results(xid, &reply).map(Some);
                }
            }
        }
        Proto::Udp => {
            let s = UdpSocket::bind(SocketAddr::new(unspecified_like(addr.ip()), 0))?;
            s.connect(addr)?;
            if !wait {
                s.send(&e.buf)?;
                return Ok(None);
            }
            s.set_read_timeout(Some(CALL_TIMEOUT / UDP_TRIES))?;
            let mut buf = vec![0u8; 65536];
            for _ in 0..UDP_TRIES {
                s.send(&e.buf)?;
                loop {
                    match s.recv(&mut buf) {
                        Ok(n) if n >= 4 && buf[..4] == xid.to_be_bytes() => {
                            return results(xid, &buf[..n]).map(Some)
                        }
                        Ok(_) => continue,
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                || e.kind() == std::io::ErrorKind::TimedOut =>
                        {
                            break
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Err(std::io::ErrorKind::TimedOut.into())
        }
    }
}

/// The any-address of `ip`'s family (what a socket to it is bound to).
fn unspecified_like(ip: IpAddr) -> IpAddr {
    if ip.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    }
}

/// The port `program` `version` is served on at `host` over `proto`, as the
/// portmapper on `host`:`portmap_port` says (0 there means "not registered").
pub fn getport(
    host: IpAddr,
    portmap_port: u16,
    proto: Proto,
    program: u32,
    version: u32,
) -> std::io::Result<u16> {
    let mut args = Encoder::new();
    let p = match proto {
        Proto::Tcp => IPPROTO_TCP,
        Proto::Udp => IPPROTO_UDP,
    };
    args.u32(program).u32(version).u32(p).u32(0);
    let pm = SocketAddr::new(host, portmap_port);
    let r = call(pm, proto, PORTMAP_PROGRAM, 2, 3, &args.buf, true)?.unwrap_or_default();
    let port = Decoder::new(&r)
        .u32()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    match u16::try_from(port) {
        Ok(0) | Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("program {program} version {version} is not registered at {host}"),
        )),
        Ok(p) => Ok(p),
    }
}

/// `getport`, then the call.
#[allow(clippy::too_many_arguments)]
pub fn call_service(
    host: IpAddr,
    portmap_port: u16,
    proto: Proto,
    program: u32,
    version: u32,
    procedure: u32,
    args: &[u8],
    wait: bool,
) -> std::io::Result<Option<Vec<u8>>> {
    let port = getport(host, portmap_port, proto, program, version)?;
    call(
        SocketAddr::new(host, port),
        proto,
        program,
        version,
        procedure,
        args,
        wait,
    )
}

/// This machine's address toward `peer` (what a packet to it would come from): the
/// name NSM gives this server in SM_NOTIFY, which the client's status monitor
/// matches against the server address its lock manager asked it to watch.
pub fn local_address_toward(peer: IpAddr) -> std::io::Result<IpAddr> {
    let s = UdpSocket::bind(SocketAddr::new(unspecified_like(peer), 0))?;
    // A UDP connect sends nothing: it only picks the route and the source address.
    s.connect(SocketAddr::new(peer, 9))?;
    Ok(s.local_addr()?.ip())
}
