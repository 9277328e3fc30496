//! Coverage-guided fuzzing of the ONC RPC call header and credential decoder
//! (`rpc::decode_call`). Checked: no panic; the arguments start inside the record; and
//! a header that decodes encodes back (with `rpc::encode_call`) to a header that decodes
//! to the same call.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs::rpc::{decode_call, encode_call};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = decode_call(data) else {
        return;
    };
    assert!(h.args_at <= data.len());
    let again = encode_call(h.xid, h.program, h.version, h.procedure, &h.credential);
    let back = decode_call(&again.buf).expect("an encoded call decodes");
    assert_eq!(
        (back.xid, back.program, back.version, back.procedure),
        (h.xid, h.program, h.version, h.procedure)
    );
    assert_eq!(back.credential, h.credential);
    assert_eq!(back.args_at, again.buf.len());
});
