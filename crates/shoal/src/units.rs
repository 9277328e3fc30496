//! Human sizes: parsing `64M`, `1G`, `1.5TiB` and printing `1.2G`; spans of time as
//! the configuration writes them (`1d`, `90s`).

use anyhow::Result;

pub fn parse_size(s: &str) -> Result<u64> {
    server::config::parse_size(s).map_err(anyhow::Error::msg)
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

/// A span of seconds in the largest unit that holds it whole, as in the
/// configuration (`1d`, `2h`, `90s`).
pub fn span(seconds: u64) -> String {
    match seconds {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Unix seconds as a UTC time: `2026-12-07 22:04:03Z`.
pub fn utc(unix: u64) -> String {
    let (y, m, d) = server::schedules::civil_from_days((unix / 86_400) as i64);
    let s = unix % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
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
        assert_eq!(span(86_400), "1d");
        assert_eq!(span(7_200), "2h");
        assert_eq!(span(90), "90s");
        assert_eq!(span(120), "2m");
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        // Checked with `date -u -d @N`: a leap year's last day and the day after, a
        // century that is not a leap year.
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00Z");
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59Z");
        assert_eq!(utc(951_868_800), "2000-03-01 00:00:00Z");
        assert_eq!(utc(1_796_688_000), "2026-12-08 00:00:00Z");
        assert_eq!(utc(4_107_542_400), "2100-03-01 00:00:00Z");
    }
}
