//! The daemon's configuration file (TOML). Every key is optional:
//!
//! ```toml
//! [nfs]
//! listen = "0.0.0.0:2049"      # NFS and MOUNT, on one port
//! portmapper = "auto"         # answer GETPORT on port 111 ("auto", "off" or an address)
//! grace_period = "90s"         # after a restart: clients reclaim their locks first
//! courtesy = "1d"              # NFSv4 state kept past a silent client's lease ("off")
//! workers = 16                 # threads running NFS calls
//! id_domain = "example.org"    # NFSv4 owners as name@example.org (default: numbers)
//!
//! [api]
//! listen = "127.0.0.1:8080"    # the admin HTTP API (and UI); "off" disables it
//! login = "auto"               # "required": log in even on loopback (auto: unless loopback)
//! tls_cert = "/etc/shoal/cert.pem"   # with tls_key: HTTPS only
//! tls_key = "/etc/shoal/key.pem"
//!
//! [cache]
//! arc_max = "4G"               # each pool's ARC bound (default: a quarter of memory)
//!
//! [alerts]
//! command = "/usr/local/bin/page-admin"   # run with each alert as JSON on stdin
//! webhook = "https://hooks.example.org/shoal"   # POSTed each alert (retried)
//!
//! [storage]
//! device_dirs = ["/srv/shoal"]  # device files the API may create pools on (and make)
//! scrub_every = "30d"           # scrub each pool this long after its last scrub
//!
//! [[share]]
//! dataset = "tank/home"
//! rules = "10.0.0.0/8(rw) *(ro)"   # as in /etc/exports; default "*(rw)"
//! ```

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NfsConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where the portmapper answers (see `Portmapper`).
    #[serde(default)]
    pub portmapper: Portmapper,
    /// How long clients that held locks before a restart have to reclaim them
    /// (NLM; NFSv4 clients end it sooner when every one of them is done).
    #[serde(default = "default_grace", deserialize_with = "duration")]
    pub grace_period: std::time::Duration,
    /// How long past its lease a silent NFSv4 client keeps its opens, locks and
    /// delegations while no other client needs them (one that does revokes them at
    /// once); then they are let go. `off`: when the lease runs out.
    #[serde(default = "default_courtesy", deserialize_with = "duration_or_off")]
    pub courtesy: std::time::Duration,
    /// The port of client machines' portmappers, where their lock managers and status
    /// monitors are looked up (111; only tests change it, through a hidden flag).
    #[serde(skip, default = "default_client_portmapper")]
    pub client_portmapper: u16,
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// NFSv4 owners go out as `name@id_domain` (the clients' idmapd Domain) rather
    /// than as numbers.
    #[serde(default)]
    pub id_domain: Option<String>,
}

fn default_listen() -> SocketAddr {
    "0.0.0.0:2049".parse().unwrap()
}

fn default_workers() -> usize {
    16
}

fn default_client_portmapper() -> u16 {
    111
}

fn default_grace() -> std::time::Duration {
    std::time::Duration::from_secs(90)
}

fn default_courtesy() -> std::time::Duration {
    std::time::Duration::from_secs(24 * 3600)
}

/// A duration (`parse_duration`), or `off` for none.
pub fn parse_duration_or_off(s: &str) -> Result<std::time::Duration, String> {
    if s.trim() == "off" {
        Ok(std::time::Duration::ZERO)
    } else {
        parse_duration(s).map_err(|e| format!("{e}, or \"off\""))
    }
}

fn duration_or_off<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration_or_off(&s).map_err(serde::de::Error::custom)
}

fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// Where the portmapper (RFC 1833 version 2, TCP and UDP) answers. Clients ask it
/// where NFS, MOUNT and the lock manager (NLM, NSM) are; an NFSv3 client with locks
/// cannot mount without it on port 111, because its lock manager asks there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Portmapper {
    /// On port 111 of the NFS address, when NFS is on the standard port 2049 and
    /// port 111 is free (a daemon on another port, a test's or a second one's, must
    /// not answer for the one on 2049); otherwise not, said in the log and status.
    #[default]
    Auto,
    Off,
    At(SocketAddr),
}

impl std::str::FromStr for Portmapper {
    type Err = String;
    fn from_str(s: &str) -> Result<Portmapper, String> {
        match s {
            "auto" => Ok(Portmapper::Auto),
            "off" => Ok(Portmapper::Off),
            a => a.parse().map(Portmapper::At).map_err(|_| {
                format!("portmapper '{a}': \"auto\", \"off\" or an address such as 0.0.0.0:111")
            }),
        }
    }
}

impl<'de> Deserialize<'de> for Portmapper {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Portmapper, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Portmapper {
    /// The address to answer on, for NFS listening on `nfs`.
    pub fn address(&self, nfs: SocketAddr) -> Option<SocketAddr> {
        match self {
            Portmapper::Off => None,
            Portmapper::At(a) => Some(*a),
            Portmapper::Auto => (nfs.port() == 2049).then(|| SocketAddr::new(nfs.ip(), 111)),
        }
    }
}

impl Default for NfsConfig {
    fn default() -> Self {
        NfsConfig {
            listen: default_listen(),
            portmapper: Portmapper::default(),
            grace_period: default_grace(),
            courtesy: default_courtesy(),
            client_portmapper: default_client_portmapper(),
            workers: default_workers(),
            id_domain: None,
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
    #[serde(default)]
    pub cache: CacheConfig,
    #[serde(default)]
    pub analytics: AnalyticsConfig,
    #[serde(default)]
    pub alerts: crate::alerts::AlertsConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub iscsi: IscsiConfig,
}

/// The iSCSI target: where its portal listens and how many workers run commands.
/// Targets themselves are made through the API.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IscsiConfig {
    #[serde(default)]
    pub listen: IscsiListen,
    #[serde(default = "default_iscsi_workers")]
    pub workers: usize,
}

impl Default for IscsiConfig {
    fn default() -> Self {
        IscsiConfig {
            listen: IscsiListen::default(),
            workers: default_iscsi_workers(),
        }
    }
}

/// Where the iSCSI portals listen: `auto` (0.0.0.0:3260 when it is free, the
/// default; when it is not, the daemon serves without iSCSI and says so in its log
/// and status), `off`, or one or more addresses separated by commas, each of which
/// must be free. Several portals are one portal group: SendTargets reports them all
/// and every LUN is the same unit (one identity) through each, for multipath.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum IscsiListen {
    #[default]
    Auto,
    Off,
    At(Vec<SocketAddr>),
}

impl IscsiListen {
    pub const STANDARD: &'static str = "0.0.0.0:3260";
}

impl std::str::FromStr for IscsiListen {
    type Err = String;
    fn from_str(s: &str) -> Result<IscsiListen, String> {
        match s {
            "auto" => Ok(IscsiListen::Auto),
            "off" => Ok(IscsiListen::Off),
            list => {
                let mut portals = Vec::new();
                for a in list.split(',').map(str::trim) {
                    let addr: SocketAddr = a.parse().map_err(|_| {
                        format!(
                            "iSCSI listen '{a}': \"auto\", \"off\" or addresses such as \
                             0.0.0.0:3260 (several separated by commas)"
                        )
                    })?;
                    if portals.contains(&addr) {
                        return Err(format!("iSCSI listen: {addr} is named twice"));
                    }
                    portals.push(addr);
                }
                Ok(IscsiListen::At(portals))
            }
        }
    }
}

impl<'de> Deserialize<'de> for IscsiListen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<IscsiListen, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Workers that run SCSI commands. A write-through write waits for its group commit
/// in a worker, so the workers bound how many writes one commit can carry: with 8, 4K
/// random writes at depth 32 ran at 12.5-14.1K IOPS here; with 32, 17.9-18.0K (64
/// gave no more). Measured in docs/bench-results.md.
fn default_iscsi_workers() -> usize {
    32
}

/// Where the pool administration API may make and look for device files.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// Directories of device files: the API creates pools on files in them (and
    /// creates missing files there), imports from them, and lists them as candidate
    /// devices. Block devices under /dev are candidates whatever this says. Empty:
    /// the API uses block devices only.
    #[serde(default)]
    pub device_dirs: Vec<PathBuf>,
    /// Scrub every pool this long after its last scrub (`30d`, `12h`, `90s`); absent:
    /// only on request. A pool first seen counts from then.
    #[serde(default, deserialize_with = "duration_or_none")]
    pub scrub_every: Option<std::time::Duration>,
}

/// Parses `30d`, `12h`, `15m` or `90s` (a whole number and one unit).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("duration '{s}' is a whole number and a unit (d, h, m, s)"))?;
    let unit_secs = match unit {
        "d" => 86_400,
        "h" => 3_600,
        "m" => 60,
        "s" | "" => 1,
        _ => return Err(format!("unknown unit in duration '{s}' (use d, h, m or s)")),
    };
    if n == 0 {
        return Err(format!("duration '{s}' must be more than zero"));
    }
    n.checked_mul(unit_secs)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("duration '{s}' out of range"))
}

fn duration_or_none<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Analytics (`/api/v1/analytics`, `/metrics`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnalyticsConfig {
    /// Off: no event is recorded (the overhead benchmark's baseline); the API answers
    /// with empty datasets.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Bytes the history on disk may take (default 1G).
    #[serde(default = "default_history_max", deserialize_with = "size")]
    pub history_max: u64,
    /// Bytes the in-memory history of all datasets may take (default 256M); beyond
    /// it the oldest points of the largest datasets leave memory (the disk keeps them).
    #[serde(default = "default_memory_max", deserialize_with = "size")]
    pub memory_max: u64,
}

fn default_history_max() -> u64 {
    1 << 30
}

fn default_memory_max() -> u64 {
    analytics::DEFAULT_MEMORY_BYTES
}

fn size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s = String::deserialize(d)?;
    parse_size(&s).map_err(serde::de::Error::custom)
}

fn default_true() -> bool {
    true
}

impl Default for AnalyticsConfig {
    fn default() -> Self {
        AnalyticsConfig {
            enabled: true,
            history_max: default_history_max(),
            memory_max: default_memory_max(),
        }
    }
}

/// Memory for caching. A size is a number with an optional unit (K, M, G, T).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Each pool's ARC bound; `None` leaves the pool's default (a quarter of memory).
    #[serde(default, deserialize_with = "size_or_none")]
    pub arc_max: Option<u64>,
}

/// Parses a human size such as `64M`, `4G` or `1.5TiB` (binary units) into bytes:
/// the one size parser of the daemon's config and the command line.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("size '{s}' is not a number with an optional unit (K, M, G, T)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(format!(
                "unknown unit '{other}' in size '{s}' (use K, M, G or T)"
            ))
        }
    };
    let bytes = n * (1u64 << shift) as f64;
    if !(bytes.is_finite() && (1.0..1e18).contains(&bytes)) {
        return Err(format!("size '{s}' out of range"));
    }
    Ok(bytes as u64)
}

fn size_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let s = String::deserialize(d)?;
    parse_size(&s).map(Some).map_err(serde::de::Error::custom)
}

/// Where the admin HTTP API (and the browser UI) listens, `None` when it is off; who
/// must log in; and its certificate when it speaks HTTPS.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    #[serde(default = "default_api", deserialize_with = "listen_or_off")]
    pub listen: Option<SocketAddr>,
    /// "auto" (the default): a login is required unless the API listens on loopback
    /// only; "required": always.
    #[serde(default)]
    pub login: LoginMode,
    /// PEM certificate chain and private key: with both, the API speaks HTTPS only.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoginMode {
    #[default]
    Auto,
    Required,
}

impl ApiConfig {
    /// Whether callers must log in: always when asked, and whenever the API can be
    /// reached from beyond this host.
    pub fn login_required(&self) -> bool {
        self.login == LoginMode::Required || self.listen.is_some_and(|a| !a.ip().is_loopback())
    }

    /// The certificate and key paths, when HTTPS is configured; one without the other
    /// is an error.
    pub fn tls(&self) -> Result<Option<(PathBuf, PathBuf)>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
            (None, None) => Ok(None),
            _ => Err("[api] tls_cert and tls_key go together: set both or neither".into()),
        }
    }
}

fn default_api() -> Option<SocketAddr> {
    Some("127.0.0.1:8080".parse().unwrap())
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: default_api(),
            login: LoginMode::Auto,
            tls_cert: None,
            tls_key: None,
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
        // The portmapper: on 111 beside the standard NFS port only, unless told.
        let nfs: SocketAddr = "10.0.0.1:2049".parse().unwrap();
        assert_eq!(c.nfs.portmapper.address(c.nfs.listen), None, "not on 2049");
        assert_eq!(
            Portmapper::Auto.address(nfs),
            Some("10.0.0.1:111".parse().unwrap())
        );
        let off = ServeConfig::parse("[nfs]\nportmapper = \"off\"\n").unwrap();
        assert_eq!(off.nfs.portmapper.address(nfs), None);
        let at = ServeConfig::parse("[nfs]\nportmapper = \"127.0.0.1:1111\"\n").unwrap();
        assert_eq!(
            at.nfs.portmapper,
            Portmapper::At("127.0.0.1:1111".parse().unwrap())
        );
        let e = ServeConfig::parse("[nfs]\nportmapper = \"yes\"\n").unwrap_err();
        assert!(
            e.to_string().contains("\"auto\", \"off\" or an address"),
            "{e}"
        );
        // iSCSI portals: one, several (one portal group), none, or refused.
        let two =
            ServeConfig::parse("[iscsi]\nlisten = \"127.0.0.1:3260, 127.0.0.2:3261\"\n").unwrap();
        assert_eq!(
            two.iscsi.listen,
            IscsiListen::At(vec![
                "127.0.0.1:3260".parse().unwrap(),
                "127.0.0.2:3261".parse().unwrap()
            ])
        );
        assert_eq!(
            ServeConfig::parse("").unwrap().iscsi.listen,
            IscsiListen::Auto
        );
        assert_eq!("off".parse::<IscsiListen>(), Ok(IscsiListen::Off));
        let e = "127.0.0.1:3260,127.0.0.1:3260"
            .parse::<IscsiListen>()
            .unwrap_err();
        assert!(e.contains("named twice"), "{e}");
        let e = "127.0.0.1:3260,nowhere".parse::<IscsiListen>().unwrap_err();
        assert!(e.contains("'nowhere'"), "{e}");
        let g = ServeConfig::parse("[nfs]\ngrace_period = \"15s\"\n").unwrap();
        assert_eq!(g.nfs.grace_period, std::time::Duration::from_secs(15));
        assert!(ServeConfig::parse("[nfs]\ngrace_period = \"0s\"\n").is_err());
        let none = ServeConfig::parse("[nfs]\ncourtesy = \"off\"\n").unwrap();
        assert_eq!(none.nfs.courtesy, std::time::Duration::ZERO);
        let two = ServeConfig::parse("[nfs]\ncourtesy = \"2h\"\n").unwrap();
        assert_eq!(two.nfs.courtesy, std::time::Duration::from_secs(7200));
        let e = ServeConfig::parse("[nfs]\ncourtesy = \"soon\"\n").unwrap_err();
        assert!(e.to_string().contains("or \"off\""), "{e}");
        assert_eq!(c.api.listen, Some("127.0.0.1:8080".parse().unwrap()));
        let off = ServeConfig::parse("[api]\nlisten = \"off\"\n").unwrap();
        assert_eq!(off.api.listen, None);
        assert!(ServeConfig::parse("[api]\nlisten = \"nowhere\"\n").is_err());
        assert!(!c.api.login_required());
        let open = ServeConfig::parse("[api]\nlisten = \"0.0.0.0:8080\"\n").unwrap();
        assert!(open.api.login_required());
        let asked = ServeConfig::parse("[api]\nlogin = \"required\"\n").unwrap();
        assert!(asked.api.login_required());
        assert!(ServeConfig::parse("[api]\nlogin = \"maybe\"\n").is_err());
        let half = ServeConfig::parse("[api]\ntls_cert = \"/c.pem\"\n").unwrap();
        assert!(half.api.tls().is_err());
        let cache = ServeConfig::parse("[cache]\narc_max = \"1536M\"\n").unwrap();
        assert_eq!(cache.cache.arc_max, Some(1536 << 20));
        assert_eq!(c.cache.arc_max, None);
        for bad in ["\"\"", "\"0\"", "\"4X\"", "\"-1G\"", "\"99999999T\"", "4"] {
            let text = format!("[cache]\narc_max = {bad}\n");
            assert!(ServeConfig::parse(&text).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn the_shipped_example_config_parses() {
        let c = ServeConfig::parse(include_str!("../../../dist/shoal.toml")).unwrap();
        assert_eq!(c.nfs.portmapper, Portmapper::Auto);
        assert_eq!(c.nfs.grace_period, std::time::Duration::from_secs(90));
        assert_eq!(c.nfs.courtesy, std::time::Duration::from_secs(86_400));
        assert_eq!(c.api, ApiConfig::default());
    }
}
