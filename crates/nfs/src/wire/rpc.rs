//! ONC RPC messages (RFC 5531): call headers, credentials, and reply headers.
//!
//! A call is decoded up to its procedure arguments; the program's handler decodes the
//! rest from the same buffer. Replies are built as an accepted or denied header
//! followed by the procedure's results.

use crate::xdr::{Decoder, Encoder, XdrError, XdrResult};

pub const RPC_VERSION: u32 = 2;
pub const MSG_CALL: u32 = 0;
pub const MSG_REPLY: u32 = 1;

pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;

/// accept_stat
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    Success,
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// auth_stat of a denied call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStat {
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    TooWeak = 5,
}

/// AUTH_SYS credentials (RFC 5531 appendix A).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    Sys(AuthSys),
    /// A flavor we do not speak (answered AUTH_ERROR / AUTH_TOOWEAK).
    Other(u32),
}

/// The header of one call; `args_at` is where its procedure arguments start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub rpc_version: u32,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    pub credential: Credential,
    pub args_at: usize,
}

/// Why a record could not be read as a call at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Not even an xid and message type: drop the record.
    Unreadable(XdrError),
    /// A reply, or another message type: ignored.
    NotACall { xid: u32 },
    /// The credential did not decode: answered AUTH_ERROR / AUTH_BADCRED.
    BadCredential { xid: u32 },
}

fn auth_sys(body: &[u8]) -> XdrResult<AuthSys> {
    let mut d = Decoder::new(body);
    let stamp = d.u32()?;
    let machine = d.opaque(255)?.to_vec();
    let uid = d.u32()?;
    let gid = d.u32()?;
    let n = d.u32()? as usize;
    if n > 16 {
        return Err(XdrError("more than 16 groups"));
    }
    let mut gids = Vec::with_capacity(n);
    for _ in 0..n {
        gids.push(d.u32()?);
    }
    d.finish()?;
    Ok(AuthSys {
        stamp,
        machine,
        uid,
        gid,
        gids,
    })
}

/// Decodes a call header from a whole record.
pub fn decode_call(record: &[u8]) -> Result<CallHeader, HeaderError> {
    let mut d = Decoder::new(record);
    let xid = d.u32().map_err(HeaderError::Unreadable)?;
    let mtype = d.u32().map_err(HeaderError::Unreadable)?;
    if mtype != MSG_CALL {
        return Err(HeaderError::NotACall { xid });
    }
    let bad = |_| HeaderError::BadCredential { xid };
    let rpc_version = d.u32().map_err(bad)?;
    let program = d.u32().map_err(bad)?;
    let version = d.u32().map_err(bad)?;
    let procedure = d.u32().map_err(bad)?;
    let flavor = d.u32().map_err(bad)?;
    let body = d.opaque(400).map_err(bad)?;
    let credential = match flavor {
        AUTH_NONE => Credential::None,
        AUTH_SYS => Credential::Sys(auth_sys(body).map_err(bad)?),
        other => Credential::Other(other),
    };
    // The verifier: any flavor, its body is ignored for AUTH_NONE and AUTH_SYS.
    d.u32().map_err(bad)?;
    d.opaque(400).map_err(bad)?;
    Ok(CallHeader {
        xid,
        rpc_version,
        program,
        version,
        procedure,
        credential,
        args_at: d.position(),
    })
}

/// Starts an accepted reply; the procedure's results follow for `Success`.
pub fn accepted(xid: u32, stat: Accept) -> Encoder {
    let mut e = Encoder::new();
    e.u32(xid).u32(MSG_REPLY).u32(0); // MSG_ACCEPTED
    e.u32(AUTH_NONE).u32(0); // verifier
    match stat {
        Accept::Success => e.u32(0),
        Accept::ProgUnavail => e.u32(1),
        Accept::ProgMismatch { low, high } => e.u32(2).u32(low).u32(high),
        Accept::ProcUnavail => e.u32(3),
        Accept::GarbageArgs => e.u32(4),
        Accept::SystemErr => e.u32(5),
    };
    e
}

/// A denied reply: wrong RPC version.
pub fn rpc_mismatch(xid: u32) -> Encoder {
    let mut e = Encoder::new();
    e.u32(xid).u32(MSG_REPLY).u32(1); // MSG_DENIED
    e.u32(0).u32(RPC_VERSION).u32(RPC_VERSION); // RPC_MISMATCH
    e
}

/// A denied reply: authentication error.
pub fn auth_error(xid: u32, stat: AuthStat) -> Encoder {
    let mut e = Encoder::new();
    e.u32(xid).u32(MSG_REPLY).u32(1); // MSG_DENIED
    e.u32(1).u32(stat as u32); // AUTH_ERROR
    e
}

/// Encodes a call (for clients: tests, the portmapper check, the load generator).
pub fn encode_call(
    xid: u32,
    program: u32,
    version: u32,
    procedure: u32,
    cred: &Credential,
) -> Encoder {
    let mut e = Encoder::new();
    e.u32(xid)
        .u32(MSG_CALL)
        .u32(RPC_VERSION)
        .u32(program)
        .u32(version)
        .u32(procedure);
    match cred {
        Credential::Sys(a) => {
            let mut body = Encoder::new();
            body.u32(a.stamp).opaque(&a.machine).u32(a.uid).u32(a.gid);
            body.u32(a.gids.len() as u32);
            for g in &a.gids {
                body.u32(*g);
            }
            e.u32(AUTH_SYS).opaque(&body.buf);
        }
        Credential::None => {
            e.u32(AUTH_NONE).u32(0);
        }
        Credential::Other(f) => {
            e.u32(*f).u32(0);
        }
    }
    e.u32(AUTH_NONE).u32(0);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_header_round_trips_with_auth_sys() {
        let cred = Credential::Sys(AuthSys {
            stamp: 9,
            machine: b"client".to_vec(),
            uid: 1000,
            gid: 100,
            gids: vec![100, 27],
        });
        let mut e = encode_call(77, 100003, 3, 1, &cred);
        e.u32(0xabcd);
        let h = decode_call(&e.buf).unwrap();
        assert_eq!(h.xid, 77);
        assert_eq!((h.program, h.version, h.procedure), (100003, 3, 1));
        assert_eq!(h.credential, cred);
        assert_eq!(&e.buf[h.args_at..], &0xabcdu32.to_be_bytes());
    }

    #[test]
    fn bad_headers_are_classified() {
        assert!(matches!(
            decode_call(&[0, 0]),
            Err(HeaderError::Unreadable(_))
        ));
        let mut e = Encoder::new();
        e.u32(5).u32(MSG_REPLY);
        assert_eq!(decode_call(&e.buf), Err(HeaderError::NotACall { xid: 5 }));
        let mut e = encode_call(6, 1, 1, 1, &Credential::None);
        e.buf.truncate(20);
        assert_eq!(
            decode_call(&e.buf),
            Err(HeaderError::BadCredential { xid: 6 })
        );
        // 17 groups is one too many.
        let mut body = Encoder::new();
        body.u32(0).opaque(b"m").u32(0).u32(0).u32(17);
        for _ in 0..17 {
            body.u32(1);
        }
        let mut e = Encoder::new();
        e.u32(8).u32(0).u32(2).u32(100003).u32(3).u32(0);
        e.u32(AUTH_SYS).opaque(&body.buf).u32(0).u32(0);
        assert_eq!(
            decode_call(&e.buf),
            Err(HeaderError::BadCredential { xid: 8 })
        );
    }
}
