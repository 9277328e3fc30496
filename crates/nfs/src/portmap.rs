//! A minimal portmapper (RFC 1833, version 2: GETPORT and DUMP), so clients that
//! ask where NFS, MOUNT, NLM and NSM live learn the one port everything is served on:
//! NFS over TCP only, MOUNT, NLM and NSM over TCP and, when the daemon listens for
//! datagrams on that port (`set_udp_port`), over UDP too.

use crate::nlm::proto::{NLM_PROGRAM, NSM_PROGRAM, NSM_V1};
use crate::rpc::Accept;
use crate::service::*;
use crate::transport::{Call, Reply};
use crate::v3::proto::*;
use crate::xdr::{Encoder, XdrResult};

const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;

impl NfsService {
    /// What this server registers: (program, version, protocol, port).
    pub fn registrations(&self) -> Vec<(u32, u32, u32, u32)> {
        let tcp = *self.nfs_port.lock().unwrap() as u32;
        let udp = self.udp_port.lock().unwrap().map(|p| p as u32);
        let mut v = vec![
            (NFS_PROGRAM, NFS_V3, IPPROTO_TCP, tcp),
            (NFS_PROGRAM, NFS_V4, IPPROTO_TCP, tcp),
        ];
        let both = [
            (MOUNT_PROGRAM, MOUNT_V3),
            (NLM_PROGRAM, 1),
            (NLM_PROGRAM, 3),
            (NLM_PROGRAM, 4),
            (NSM_PROGRAM, NSM_V1),
        ];
        for (prog, vers) in both {
            v.push((prog, vers, IPPROTO_TCP, tcp));
            if let Some(udp) = udp {
                v.push((prog, vers, IPPROTO_UDP, udp));
            }
        }
        v
    }

    // ---- portmapper v2 (GETPORT and DUMP only) ----

    pub(crate) fn portmap(&self, call: &Call<'_>) -> Reply {
        let mut d = call.args();
        let r: XdrResult<Encoder> = match call.header.procedure {
            0 => Ok(call.reply(Accept::Success)),
            3 => (|| {
                let prog = d.u32()?;
                let vers = d.u32()?;
                let prot = d.u32()?;
                let _port = d.u32()?;
                d.finish()?;
                let port = self
                    .registrations()
                    .into_iter()
                    .find(|r| (r.0, r.1, r.2) == (prog, vers, prot))
                    .map_or(0, |r| r.3);
                let mut e = call.reply(Accept::Success);
                e.u32(port);
                Ok(e)
            })(),
            4 => (|| {
                d.finish()?;
                let mut e = call.reply(Accept::Success);
                for (prog, vers, prot, port) in self.registrations() {
                    e.bool(true).u32(prog).u32(vers).u32(prot).u32(port);
                }
                e.bool(false);
                Ok(e)
            })(),
            _ => return Reply::new(call.reply(Accept::ProcUnavail)),
        };
        match r {
            Ok(e) => Reply::new(e),
            Err(_) => Reply::new(call.reply(Accept::GarbageArgs)),
        }
    }
}
