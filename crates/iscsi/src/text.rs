//! Text keys (RFC 7143 6): `key=value` pairs, each ended by a NUL, in Login and Text
//! PDUs. Keys are at most 63 characters of letters, digits and `.-+@_`; values at most
//! 8192 bytes (255 for most, but CHAP values are long); malformed pairs are an error
//! the login ends on.

/// A key's or a value's limit.
const KEY_MAX: usize = 63;
const VALUE_MAX: usize = 8192;

pub fn parse(data: &[u8]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in data.split(|&b| b == 0) {
        if pair.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(pair).map_err(|_| "a text key is not UTF-8".to_string())?;
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| format!("text '{}' has no '='", text.escape_debug()))?;
        if k.is_empty()
            || k.len() > KEY_MAX
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-+@_".contains(c))
        {
            return Err(format!("bad text key '{}'", k.escape_debug()));
        }
        if v.len() > VALUE_MAX {
            return Err(format!("value of {k} is {} bytes long", v.len()));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

pub fn encode(pairs: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_encode() {
        let data = b"InitiatorName=iqn.x:y\0HeaderDigest=CRC32C,None\0\0";
        let p = parse(data).unwrap();
        assert_eq!(p[0], ("InitiatorName".into(), "iqn.x:y".into()));
        assert_eq!(p[1].1, "CRC32C,None");
        assert_eq!(parse(&encode(&p)).unwrap(), p);
        assert!(parse(b"NoEquals\0").is_err());
        assert!(parse(b"=v\0").is_err());
        assert!(parse(b"bad key=v\0").is_err());
        assert!(parse(&[b'K', b'=', 0xFF, 0]).is_err());
        let long = format!("K={}\0", "x".repeat(9000));
        assert!(parse(long.as_bytes()).is_err());
    }
}
