//! Operational parameters and their negotiation (RFC 7143 13): what the initiator
//! offers, what this target answers, and the values the session then runs with.
//! Defaults are the RFC's; the target's own limits are the constants below.

/// The target's side of the negotiation.
pub const MAX_RECV_DATA_SEGMENT: u32 = 262_144;
pub const MAX_BURST: u32 = 1 << 20;
pub const FIRST_BURST: u32 = 262_144;
pub const MAX_OUTSTANDING_R2T: u32 = 4;
/// The bound on data segments during login (RFC 7143 13.12: 8192 until negotiated).
pub const LOGIN_DATA_SEGMENT: u32 = 8192;

/// The values a session runs with once logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionParams {
    pub header_digest: bool,
    pub data_digest: bool,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_burst: u32,
    pub first_burst: u32,
    pub max_outstanding_r2t: u32,
    /// What the initiator may receive in one data segment (its declaration).
    pub initiator_max_recv: u32,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
}

impl Default for SessionParams {
    fn default() -> Self {
        SessionParams {
            header_digest: false,
            data_digest: false,
            initial_r2t: true,
            immediate_data: true,
            max_burst: 262_144,
            first_burst: 65_536,
            max_outstanding_r2t: 1,
            initiator_max_recv: 8192,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
        }
    }
}

fn yes_no(v: &str) -> Option<bool> {
    match v {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn number(v: &str, min: u32, max: u32) -> Option<u32> {
    let n: u64 = v.parse().ok()?;
    (n >= min as u64 && n <= max as u64).then_some(n as u32)
}

fn bool_text(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_string()
}

/// Answers one operational key the initiator sent, recording the outcome in `p`:
/// `Some(answer)` for a key that must be answered, `None` for a declaration or a key
/// settled elsewhere (names, session type, CHAP). A value outside the key's domain is
/// answered `Reject`, an unknown key `NotUnderstood`.
pub fn negotiate(p: &mut SessionParams, key: &str, value: &str) -> Option<String> {
    let reject = || Some("Reject".to_string());
    match key {
        "HeaderDigest" | "DataDigest" => {
            let pick = value.split(',').find(|v| *v == "CRC32C" || *v == "None");
            match pick {
                Some(v) => {
                    let on = v == "CRC32C";
                    if key == "HeaderDigest" {
                        p.header_digest = on;
                    } else {
                        p.data_digest = on;
                    }
                    Some(v.to_string())
                }
                None => reject(),
            }
        }
        "MaxConnections" => match number(value, 1, 65535) {
            Some(_) => Some("1".into()),
            None => reject(),
        },
        "InitialR2T" => match yes_no(value) {
            // OR: the target would do without.
            Some(v) => {
                p.initial_r2t = v;
                Some(bool_text(v))
            }
            None => reject(),
        },
        "ImmediateData" => match yes_no(value) {
            // AND: the target takes it.
            Some(v) => {
                p.immediate_data = v;
                Some(bool_text(v))
            }
            None => reject(),
        },
        "MaxBurstLength" => match number(value, 512, (1 << 24) - 1) {
            Some(v) => {
                p.max_burst = v.min(MAX_BURST);
                Some(p.max_burst.to_string())
            }
            None => reject(),
        },
        "FirstBurstLength" => match number(value, 512, (1 << 24) - 1) {
            Some(v) => {
                p.first_burst = v.min(FIRST_BURST);
                Some(p.first_burst.to_string())
            }
            None => reject(),
        },
        "MaxOutstandingR2T" => match number(value, 1, 65535) {
            Some(v) => {
                p.max_outstanding_r2t = v.min(MAX_OUTSTANDING_R2T);
                Some(p.max_outstanding_r2t.to_string())
            }
            None => reject(),
        },
        "MaxRecvDataSegmentLength" => match number(value, 512, (1 << 24) - 1) {
            Some(v) => {
                p.initiator_max_recv = v;
                None
            }
            None => reject(),
        },
        "DataPDUInOrder" | "DataSequenceInOrder" => match yes_no(value) {
            // OR, and the target wants them in order.
            Some(_) => {
                if key == "DataPDUInOrder" {
                    p.data_pdu_in_order = true;
                } else {
                    p.data_sequence_in_order = true;
                }
                Some("Yes".into())
            }
            None => reject(),
        },
        "DefaultTime2Wait" => match number(value, 0, 3600) {
            Some(v) => Some(v.max(2).to_string()),
            None => reject(),
        },
        "DefaultTime2Retain" => match number(value, 0, 3600) {
            // ERL 0: nothing is kept for a connection that is gone.
            Some(_) => Some("0".into()),
            None => reject(),
        },
        "ErrorRecoveryLevel" => match number(value, 0, 2) {
            Some(_) => Some("0".into()),
            None => reject(),
        },
        "IFMarker" | "OFMarker" => Some("No".into()),
        "IFMarkInt" | "OFMarkInt" => Some("Irrelevant".into()),
        "InitiatorName"
        | "InitiatorAlias"
        | "TargetName"
        | "SessionType"
        | "AuthMethod"
        | "CHAP_A"
        | "CHAP_I"
        | "CHAP_C"
        | "CHAP_N"
        | "CHAP_R"
        | "TargetAlias"
        | "TargetAddress"
        | "TargetPortalGroupTag"
        | "SendTargets" => None,
        _ => Some("NotUnderstood".into()),
    }
}

/// After the initiator's keys: FirstBurstLength may not exceed MaxBurstLength.
pub fn settle(p: &mut SessionParams) {
    p.first_burst = p.first_burst.min(p.max_burst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_follows_its_rule() {
        let mut p = SessionParams::default();
        assert_eq!(
            negotiate(&mut p, "HeaderDigest", "CRC32C,None").unwrap(),
            "CRC32C"
        );
        assert!(p.header_digest);
        assert_eq!(negotiate(&mut p, "DataDigest", "None").unwrap(), "None");
        assert_eq!(negotiate(&mut p, "DataDigest", "MD5").unwrap(), "Reject");
        assert_eq!(negotiate(&mut p, "MaxConnections", "8").unwrap(), "1");
        assert_eq!(negotiate(&mut p, "InitialR2T", "No").unwrap(), "No");
        assert!(!p.initial_r2t);
        assert_eq!(
            negotiate(&mut p, "MaxBurstLength", "16776192").unwrap(),
            "1048576"
        );
        assert_eq!(
            negotiate(&mut p, "FirstBurstLength", "65536").unwrap(),
            "65536"
        );
        assert_eq!(negotiate(&mut p, "MaxOutstandingR2T", "1").unwrap(), "1");
        assert_eq!(
            negotiate(&mut p, "MaxRecvDataSegmentLength", "262144"),
            None
        );
        assert_eq!(p.initiator_max_recv, 262144);
        assert_eq!(negotiate(&mut p, "ErrorRecoveryLevel", "2").unwrap(), "0");
        assert_eq!(
            negotiate(&mut p, "X-com.example.thing", "1").unwrap(),
            "NotUnderstood"
        );
        assert_eq!(
            negotiate(&mut p, "MaxBurstLength", "lots").unwrap(),
            "Reject"
        );
        assert_eq!(negotiate(&mut p, "InitialR2T", "Maybe").unwrap(), "Reject");
        p.first_burst = 1 << 20;
        p.max_burst = 4096;
        settle(&mut p);
        assert_eq!(p.first_burst, 4096);
    }
}
