//! Coverage-guided fuzzing of the XDR decoder and the NFSv3 argument codecs on their
//! own: the input is a small program (each byte picks the next decode) run against the
//! rest of the input. Checked: no panic; the decoder's position only moves forward, in
//! whole XDR units, never past the end; an opaque never exceeds its bound; a decoded
//! sattr3 encodes back to exactly the bytes it was read from; and the record-marking
//! reader refuses oversize records instead of allocating them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfs::proto::{decode_diropargs, decode_sattr, decode_time, encode_sattr, FHSIZE3};
use nfs::xdr::{Decoder, Encoder};

fuzz_target!(|data: &[u8]| {
    let Some((&steps, rest)) = data.split_first() else {
        return;
    };
    let (program, input) = rest.split_at((steps as usize % 16).min(rest.len()));
    let mut d = Decoder::new(input);
    for &op in program {
        let before = d.position();
        let ok = match op % 8 {
            0 => d.u32().is_ok(),
            1 => d.u64().is_ok(),
            2 => d.bool().is_ok(),
            3 => match d.opaque(FHSIZE3) {
                Ok(b) => {
                    assert!(b.len() <= FHSIZE3);
                    true
                }
                Err(_) => false,
            },
            4 => d.fixed((op as usize >> 3) * 4).is_ok(),
            5 => {
                let start = d.position();
                match decode_sattr(&mut d) {
                    Ok(s) => {
                        let mut e = Encoder::new();
                        encode_sattr(&mut e, &s);
                        assert_eq!(e.buf.as_slice(), &input[start..d.position()]);
                        true
                    }
                    Err(_) => false,
                }
            }
            6 => decode_diropargs(&mut d).is_ok(),
            _ => decode_time(&mut d).is_ok(),
        };
        let after = d.position();
        assert!(after <= input.len());
        if ok {
            assert!(after >= before && (after - before) % 4 == 0);
        } else {
            break;
        }
    }
    // Record marking over the same bytes: whole records come back, oversize ones are
    // refused, and nothing larger than the limit is ever allocated.
    let mut cursor = std::io::Cursor::new(input);
    while let Ok(record) = nfs::transport::read_reply_record(&mut cursor) {
        assert!(record.len() <= nfs::transport::MAX_RECORD_BYTES);
    }
});
