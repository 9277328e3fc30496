//! The daemon's configuration file (TOML). Every key is optional:
//!
//! ```toml
//! [nfs]
//! listen = "0.0.0.0:2049"      # NFS and MOUNT, on one port
//! portmapper = "0.0.0.0:111"   # optional: answer GETPORT so clients need no port options
//! workers = 16                 # threads running NFS calls
//!
//! [api]
//! listen = "127.0.0.1:8080"    # the admin HTTP API (and UI); "off" disables it
//!
//! [[share]]
//! dataset = "tank/home"
//! rules = "10.0.0.0/8(rw) *(ro)"   # as in /etc/exports; default "*(rw)"
//! ```

use serde::Deserialize;
use std::net::SocketAddr;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NfsConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub portmapper: Option<SocketAddr>,
    #[serde(default = "default_workers")]
    pub workers: usize,
}

fn default_listen() -> SocketAddr {
    "0.0.0.0:2049".parse().unwrap()
}

fn default_workers() -> usize {
    16
}

impl Default for NfsConfig {
    fn default() -> Self {
        NfsConfig {
            listen: default_listen(),
            portmapper: None,
            workers: default_workers(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ShareConfig {
    pub dataset: String,
    #[serde(default = "default_rules")]
    pub rules: String,
}

pub fn default_rules() -> String {
    "*(rw)".into()
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    #[serde(default)]
    pub nfs: NfsConfig,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default, rename = "share")]
    pub shares: Vec<ShareConfig>,
}

/// Where the admin HTTP API listens; `None` when it is off.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    #[serde(default = "default_api", deserialize_with = "listen_or_off")]
    pub listen: Option<SocketAddr>,
}

fn default_api() -> Option<SocketAddr> {
    Some("127.0.0.1:8080".parse().unwrap())
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: default_api(),
        }
    }
}

/// Parses an API address, or "off".
pub fn parse_api_listen(s: &str) -> Result<Option<SocketAddr>, String> {
    if s == "off" {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("'{s}' is not an address:port or \"off\""))
}

fn listen_or_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    parse_api_listen(&s).map_err(serde::de::Error::custom)
}

impl ServeConfig {
    pub fn parse(text: &str) -> Result<ServeConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_with_defaults_and_refuses_unknown_keys() {
        let c = ServeConfig::parse(
            "[nfs]\nlisten = \"127.0.0.1:2050\"\n[[share]]\ndataset = \"tank/a\"\n",
        )
        .unwrap();
        assert_eq!(c.nfs.listen.port(), 2050);
        assert_eq!(c.nfs.workers, 16);
        assert_eq!(c.shares[0].rules, "*(rw)");
        assert_eq!(ServeConfig::parse("").unwrap(), ServeConfig::default());
        assert!(ServeConfig::parse("[nfs]\nlisten = 5\n").is_err());
        assert!(ServeConfig::parse("[nfs]\nlisten_on = \"x\"\n").is_err());
        assert_eq!(c.api.listen, Some("127.0.0.1:8080".parse().unwrap()));
        let off = ServeConfig::parse("[api]\nlisten = \"off\"\n").unwrap();
        assert_eq!(off.api.listen, None);
        assert!(ServeConfig::parse("[api]\nlisten = \"nowhere\"\n").is_err());
    }

    #[test]
    fn the_shipped_example_config_parses() {
        let c = ServeConfig::parse(include_str!("../../../dist/shoal.toml")).unwrap();
        assert_eq!(c.nfs.portmapper, Some("0.0.0.0:111".parse().unwrap()));
        assert_eq!(c.api, ApiConfig::default());
    }
}
