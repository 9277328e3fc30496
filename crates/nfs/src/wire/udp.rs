//! ONC RPC over UDP, for the small programs that clients still call by datagram:
//! the portmapper, MOUNT, NLM and NSM (a client's status monitor sends SM_NOTIFY
//! by UDP only, and older lock managers lock by UDP). NFS itself is served over
//! TCP only; a datagram for a program not in the server's list is answered
//! PROG_UNAVAIL.
//!
//! One thread a socket reads a datagram, answers it through the same
//! `answer_record` as TCP records (header checks, then the service), and sends the
//! reply to where the datagram came from. A datagram is one whole call (no record
//! marking); one larger than `MAX_DATAGRAM` is cut short by the socket and fails to
//! decode, which costs a GARBAGE_ARGS at most. UDP calls have no connection, so
//! they get no back channel (`Call::back` is `None`). Nothing here keeps state
//! between datagrams: a retransmitted lock call is answered again, which NLM's
//! calls allow (taking a lock its owner holds changes nothing).

use crate::rpc::{self, Accept};
use crate::transport::{answer_record, Service};
use analytics::Ticks;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Largest datagram read (what UDP can carry).
pub const MAX_DATAGRAM: usize = 65_536;
/// How often a reader looks whether it should stop.
const POLL: Duration = Duration::from_millis(250);

/// Readers of UDP sockets, stopped (and joined) by `stop` or on drop.
pub struct UdpServer {
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    addrs: Vec<SocketAddr>,
}

impl UdpServer {
    /// Serves `programs` (RPC program numbers) on every socket through `service`.
    pub fn start(
        sockets: Vec<UdpSocket>,
        service: Arc<dyn Service>,
        programs: &'static [u32],
    ) -> std::io::Result<UdpServer> {
        let stopping = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut addrs = Vec::new();
        for socket in sockets {
            socket.set_read_timeout(Some(POLL))?;
            addrs.push(socket.local_addr()?);
            let (stopping, service) = (stopping.clone(), service.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("rpc-udp".into())
                    .spawn(move || serve(socket, &*service, programs, &stopping))?,
            );
        }
        Ok(UdpServer {
            stopping,
            threads,
            addrs,
        })
    }

    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stopping.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for UdpServer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn serve(socket: UdpSocket, service: &dyn Service, programs: &[u32], stopping: &AtomicBool) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !stopping.load(Ordering::Acquire) {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut
                    || e.kind() == std::io::ErrorKind::Interrupted =>
            {
                continue
            }
            Err(e) => {
                tracing::warn!("reading a UDP datagram failed: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        let datagram = &buf[..n];
        let reply = match rpc::decode_call(datagram) {
            Ok(h) if !programs.contains(&h.program) => Some(crate::transport::Reply::new(
                rpc::accepted(h.xid, Accept::ProgUnavail),
            )),
            _ => answer_record(service, peer, datagram, Ticks::now()),
        };
        if let Some(r) = reply.filter(|r| !r.is_empty()) {
            if let Err(e) = socket.send_to(&r.to_bytes(), peer) {
                tracing::debug!(%peer, "sending a UDP reply failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Call, Reply};

    struct Echo;

    impl Service for Echo {
        fn call(&self, call: &Call<'_>) -> Option<Reply> {
            let mut e = call.reply(Accept::Success);
            e.u32(call.header.procedure);
            assert!(call.back.is_none(), "datagrams have no back channel");
            Some(Reply::new(e))
        }
    }

    #[test]
    fn datagrams_are_answered_and_programs_not_listed_are_refused() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let server = UdpServer::start(vec![socket], Arc::new(Echo), &[7]).unwrap();
        let addr = server.local_addrs()[0];
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 512];
        for (program, accept_stat) in [(7u32, 0u32), (8, 1)] {
            let call = rpc::encode_call(42, program, 1, 9, &rpc::Credential::None);
            c.send_to(&call.buf, addr).unwrap();
            let n = c.recv(&mut buf).unwrap();
            // xid, REPLY, MSG_ACCEPTED, verifier (flavor, length), accept_stat.
            assert_eq!(buf[..4], 42u32.to_be_bytes());
            assert_eq!(buf[20..24], accept_stat.to_be_bytes(), "program {program}");
            if accept_stat == 0 {
                assert_eq!(n, 28);
                assert_eq!(buf[24..28], 9u32.to_be_bytes());
            }
        }
        // Garbage gets no reply and does not stop the reader.
        c.send_to(&[1, 2, 3], addr).unwrap();
        let call = rpc::encode_call(43, 7, 1, 1, &rpc::Credential::None);
        c.send_to(&call.buf, addr).unwrap();
        c.recv(&mut buf).unwrap();
        assert_eq!(buf[..4], 43u32.to_be_bytes());
        server.stop();
    }
}
