//! A minimal portmapper (RFC 1833, version 2: GETPORT and DUMP), so clients that
//! ask where NFS and MOUNT live learn the one port everything is served on.

use crate::rpc::Accept;
use crate::service::*;
use crate::transport::{Call, Reply};
use crate::v3::proto::*;
use crate::xdr::{Encoder, XdrResult};

impl NfsService {
    // ---- portmapper v2 (GETPORT and DUMP only) ----

    pub(crate) fn portmap(&self, call: &Call<'_>) -> Reply {
        const IPPROTO_TCP: u32 = 6;
        let port = *self.nfs_port.lock().unwrap() as u32;
        let mut d = call.args();
        let r: XdrResult<Encoder> = match call.header.procedure {
            0 => Ok(call.reply(Accept::Success)),
            3 => (|| {
                let prog = d.u32()?;
                let vers = d.u32()?;
                let prot = d.u32()?;
                let _port = d.u32()?;
                d.finish()?;
                let served = prot == IPPROTO_TCP
                    && matches!(
                        (prog, vers),
                        (NFS_PROGRAM, NFS_V3) | (NFS_PROGRAM, NFS_V4) | (MOUNT_PROGRAM, MOUNT_V3)
                    );
                let mut e = call.reply(Accept::Success);
                e.u32(if served { port } else { 0 });
                Ok(e)
            })(),
            4 => (|| {
                d.finish()?;
                let mut e = call.reply(Accept::Success);
                for (prog, vers) in [
                    (NFS_PROGRAM, NFS_V3),
                    (NFS_PROGRAM, NFS_V4),
                    (MOUNT_PROGRAM, MOUNT_V3),
                ] {
                    e.bool(true).u32(prog).u32(vers).u32(IPPROTO_TCP).u32(port);
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
