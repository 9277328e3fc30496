//! Human sizes: parsing `64M`, `1G`, `1.5TiB` and printing `1.2G`.

use anyhow::{bail, Result};

pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = match num.parse() {
        Ok(n) => n,
        Err(_) => bail!("size '{s}' is not a number with an optional unit (K, M, G, T)"),
    };
    let mult: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => bail!("unknown size unit '{other}' in '{s}' (use K, M, G or T)"),
    };
    let bytes = n * mult as f64;
    if !(bytes.is_finite() && (1.0..1e18).contains(&bytes)) {
        bail!("size '{s}' out of range");
    }
    Ok(bytes as u64)
}

pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else if v < 10.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5K").unwrap(), 1536);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("1Q").is_err());
        assert_eq!(human(1536), "1.5K");
        assert_eq!(human(100 << 30), "100G");
    }
}
