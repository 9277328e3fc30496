//! Export rules: which clients may reach a share, and as whom.
//!
//! The text form is the one storage engineers know from `/etc/exports`: a space
//! separated list of `CLIENTS(OPTIONS)`, where CLIENTS is `*`, an IP address, a CIDR
//! block (`10.0.0.0/8`, `fd00::/8`), a host name (`nas.example.org`) or a netgroup
//! (`@servers`), and OPTIONS a comma separated list of `rw`,
//! `ro`, `root_squash` (the default), `no_root_squash`, `all_squash`, `anonuid=N`,
//! `anongid=N`, `secure` (client port below 1024) and `insecure` (the default). The
//! first rule that matches a client applies; a client no rule matches is refused.
//! Host names and netgroups match the addresses they resolve to, cached, with the
//! failure mode of `client_names` (closed: a name that no longer resolves matches no
//! one after a grace period); wildcard names are refused.

use crate::rpc::Credential;
use serde::Serialize;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

pub const NOBODY: u32 = 65534;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Squash {
    None,
    Root,
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clients {
    Any,
    Net {
        addr: IpAddr,
        prefix: u8,
    },
    /// A host name, matched by the addresses it resolves to.
    Host(String),
    /// `@name`: the hosts of a netgroup.
    Netgroup(String),
}

impl Clients {
    fn matches(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let resolved = |host: &str| crate::client_names::addresses_of(host).contains(&ip);
        match *self {
            Clients::Host(ref name) => resolved(name),
            Clients::Netgroup(ref group) => crate::client_names::netgroup_hosts(group)
                .iter()
                .any(|h| resolved(h)),
            Clients::Any => true,
            Clients::Net { addr, prefix } => match (addr, ip) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    let mask = if prefix == 0 {
                        0
                    } else {
                        u32::MAX << (32 - prefix)
                    };
                    u32::from(a) & mask == u32::from(b) & mask
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => {
                    let mask = if prefix == 0 {
                        0
                    } else {
                        u128::MAX << (128 - prefix)
                    };
                    u128::from(a) & mask == u128::from(b) & mask
                }
                _ => false,
            },
        }
    }
}

/// IPv4 clients that reach an IPv6 socket as `::ffff:a.b.c.d` match IPv4 rules.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl fmt::Display for Clients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Clients::Any => f.write_str("*"),
            Clients::Host(name) => f.write_str(name),
            Clients::Netgroup(group) => write!(f, "@{group}"),
            Clients::Net { addr, prefix } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                if *prefix == full {
                    write!(f, "{addr}")
                } else {
                    write!(f, "{addr}/{prefix}")
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub clients: Clients,
    pub read_only: bool,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
    pub secure: bool,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({},{},anonuid={},anongid={},{})",
            self.clients,
            if self.read_only { "ro" } else { "rw" },
            match self.squash {
                Squash::None => "no_root_squash",
                Squash::Root => "root_squash",
                Squash::All => "all_squash",
            },
            self.anon_uid,
            self.anon_gid,
            if self.secure { "secure" } else { "insecure" }
        )
    }
}

/// The rules of one share, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRules {
    pub rules: Vec<Rule>,
}

/// Who a call runs as, after squashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub read_only: bool,
    pub cred: fs::Cred,
    /// The caller said it was root and the rule made it someone else: a permission
    /// refusal is then counted as `root_squashed`.
    pub root_squashed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No rule names this client.
    NotAllowed,
    /// The matching rule requires a port below 1024.
    InsecurePort,
}

impl Refusal {
    /// The reason as counted in Analytics (`nfs.refusals[reason]`) and logged.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NotAllowed => "not_allowed",
            Refusal::InsecurePort => "insecure_port",
        }
    }
}

impl ExportRules {
    /// Parses `CLIENTS(OPTIONS) ...`.
    pub fn parse(text: &str) -> Result<ExportRules, String> {
        let mut rules = Vec::new();
        for item in text.split_whitespace() {
            let (who, opts) = match item.split_once('(') {
                Some((w, rest)) => {
                    let opts = rest
                        .strip_suffix(')')
                        .ok_or_else(|| format!("'{item}': options must end with ')'"))?;
                    (w, opts)
                }
                None => (item, ""),
            };
            let clients = parse_clients(who)?;
            let mut rule = Rule {
                clients,
                read_only: false,
                squash: Squash::Root,
                anon_uid: NOBODY,
                anon_gid: NOBODY,
                secure: false,
            };
            for opt in opts.split(',').filter(|o| !o.is_empty()) {
                match opt {
                    "rw" => rule.read_only = false,
                    "ro" => rule.read_only = true,
                    "root_squash" => rule.squash = Squash::Root,
                    "no_root_squash" => rule.squash = Squash::None,
                    "all_squash" => rule.squash = Squash::All,
                    "secure" => rule.secure = true,
                    "insecure" => rule.secure = false,
                    _ => {
                        if let Some(v) = opt.strip_prefix("anonuid=") {
                            rule.anon_uid = v
                                .parse()
                                .map_err(|_| format!("anonuid '{v}' is not a number"))?;
                        } else if let Some(v) = opt.strip_prefix("anongid=") {
                            rule.anon_gid = v
                                .parse()
                                .map_err(|_| format!("anongid '{v}' is not a number"))?;
                        } else {
                            return Err(format!(
                                "unknown export option '{opt}' (known: rw, ro, root_squash, \
                                 no_root_squash, all_squash, anonuid=N, anongid=N, secure, insecure)"
                            ));
                        }
                    }
                }
            }
            rules.push(rule);
        }
        if rules.is_empty() {
            return Err("no export rules (use '*(rw)' to allow every client)".into());
        }
        Ok(ExportRules { rules })
    }

    pub fn rule_for(&self, ip: IpAddr) -> Option<&Rule> {
        self.rules.iter().find(|r| r.clients.matches(ip))
    }

    /// How a call from `peer` with `cred` may act, or why it may not.
    pub fn access(&self, peer: SocketAddr, cred: &Credential) -> Result<Access, Refusal> {
        let rule = self.rule_for(peer.ip()).ok_or(Refusal::NotAllowed)?;
        if rule.secure && peer.port() >= 1024 {
            return Err(Refusal::InsecurePort);
        }
        let anon = fs::Cred {
            uid: rule.anon_uid,
            gid: rule.anon_gid,
            groups: vec![],
        };
        let claimed_root = matches!(cred, Credential::Sys(a) if a.uid == 0);
        let cred = match cred {
            Credential::Sys(a) => match rule.squash {
                Squash::All => anon,
                // As knfsd: uid 0 and group 0 become the anonymous ids, and group 0
                // leaves the supplementary groups.
                Squash::Root => fs::Cred {
                    uid: if a.uid == 0 { rule.anon_uid } else { a.uid },
                    gid: if a.gid == 0 { rule.anon_gid } else { a.gid },
                    groups: a.gids.iter().copied().filter(|&g| g != 0).collect(),
                },
                Squash::None => fs::Cred {
                    uid: a.uid,
                    gid: a.gid,
                    groups: a.gids.clone(),
                },
            },
            _ => anon,
        };
        Ok(Access {
            read_only: rule.read_only,
            root_squashed: claimed_root && cred.uid != 0,
            cred,
        })
    }
}

impl fmt::Display for ExportRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.rules.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(" "))
    }
}

fn parse_clients(who: &str) -> Result<Clients, String> {
    if who == "*" {
        return Ok(Clients::Any);
    }
    if let Some(group) = who.strip_prefix('@') {
        if group.is_empty()
            || !group
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(format!(
                "'{who}': a netgroup name is letters, digits, - _ ."
            ));
        }
        return Ok(Clients::Netgroup(group.to_string()));
    }
    let (addr, prefix) = match who.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (who, None),
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        if prefix.is_none() && crate::client_names::valid_host_name(who) {
            return Ok(Clients::Host(who.to_ascii_lowercase()));
        }
        return Err(format!(
            "'{who}': clients are '*', an IP address, a CIDR block, a host name or \
             @netgroup (no wildcard names)"
        ));
    };
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|&p| p <= full)
            .ok_or_else(|| format!("'{who}': prefix length must be 0 to {full}"))?,
        None => full,
    };
    Ok(Clients::Net { addr, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::AuthSys;

    fn sys(uid: u32, gid: u32) -> Credential {
        Credential::Sys(AuthSys {
            uid,
            gid,
            gids: vec![gid, 0, 5],
            ..AuthSys::default()
        })
    }

    #[test]
    fn first_matching_rule_applies_with_squashing() {
        let r = ExportRules::parse(
            "10.1.0.0/16(ro,all_squash,anonuid=7,anongid=8) 10.0.0.0/8(rw,no_root_squash) *(rw)",
        )
        .unwrap();
        let a = r
            .access("10.1.2.3:900".parse().unwrap(), &sys(0, 0))
            .unwrap();
        assert!(a.read_only);
        assert_eq!((a.cred.uid, a.cred.gid), (7, 8));
        let a = r
            .access("10.2.2.3:900".parse().unwrap(), &sys(0, 0))
            .unwrap();
        assert!(!a.read_only);
        assert_eq!(a.cred.uid, 0);
        // Root squash (the default) maps uid 0 and group 0 to nobody.
        let a = r
            .access("192.168.1.1:900".parse().unwrap(), &sys(0, 0))
            .unwrap();
        assert_eq!((a.cred.uid, a.cred.gid), (NOBODY, NOBODY));
        assert_eq!(a.cred.groups, vec![5]);
        let a = r
            .access("192.168.1.1:900".parse().unwrap(), &sys(1000, 100))
            .unwrap();
        assert_eq!((a.cred.uid, a.cred.gid), (1000, 100));
        // AUTH_NONE is the anonymous user.
        let a = r
            .access("192.168.1.1:900".parse().unwrap(), &Credential::None)
            .unwrap();
        assert_eq!(a.cred.uid, NOBODY);
        // IPv4 through an IPv6 socket.
        let a = r
            .access("[::ffff:10.1.0.9]:900".parse().unwrap(), &sys(1, 1))
            .unwrap();
        assert!(a.read_only);
    }

    #[test]
    fn refusals_and_parse_errors() {
        let r = ExportRules::parse("127.0.0.1(rw,secure)").unwrap();
        assert_eq!(
            r.access("127.0.0.1:40000".parse().unwrap(), &sys(1, 1)),
            Err(Refusal::InsecurePort)
        );
        assert!(r
            .access("127.0.0.1:700".parse().unwrap(), &sys(1, 1))
            .is_ok());
        assert_eq!(
            r.access("127.0.0.2:700".parse().unwrap(), &sys(1, 1)),
            Err(Refusal::NotAllowed)
        );
        for bad in [
            "",
            "*.example(rw)",
            "10.0.0.0/33",
            "*(rw,bogus)",
            "*(rw",
            "@(rw)",
            "a/8",
        ] {
            assert!(ExportRules::parse(bad).is_err(), "{bad}");
        }
        let text = ExportRules::parse("10.0.0.0/8(ro) ::1")
            .unwrap()
            .to_string();
        assert_eq!(
            ExportRules::parse(&text).unwrap(),
            ExportRules::parse("10.0.0.0/8(ro) ::1").unwrap()
        );
    }

    #[test]
    fn host_names_and_netgroups_match_what_they_resolve_to() {
        // Only names /etc/hosts answers: no query leaves the machine.
        let r = ExportRules::parse("localhost(ro) 10.0.0.0/8(rw)").unwrap();
        assert_eq!(
            r.to_string().split(' ').next().unwrap().split('(').next(),
            Some("localhost")
        );
        let a = r
            .access("127.0.0.1:900".parse().unwrap(), &sys(1, 1))
            .unwrap();
        assert!(a.read_only);
        assert!(
            !r.access("10.1.1.1:900".parse().unwrap(), &sys(1, 1))
                .unwrap()
                .read_only
        );
        assert_eq!(
            r.access("127.0.0.2:900".parse().unwrap(), &sys(1, 1)),
            Err(Refusal::NotAllowed)
        );
        let dir = std::env::temp_dir().join(format!("shoal-netgroup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("netgroup");
        std::fs::write(&file, "lab (localhost,,) (,bob,)\nall lab\n").unwrap();
        std::env::set_var("SHOAL_NETGROUP_FILE", &file);
        let r = ExportRules::parse("@all(rw,no_root_squash)").unwrap();
        assert_eq!(
            r.to_string(),
            "@all(rw,no_root_squash,anonuid=65534,anongid=65534,insecure)"
        );
        assert!(r
            .access("127.0.0.1:900".parse().unwrap(), &sys(0, 0))
            .is_ok());
        assert_eq!(
            r.access("127.0.0.3:900".parse().unwrap(), &sys(0, 0)),
            Err(Refusal::NotAllowed)
        );
        let r = ExportRules::parse("@nobody-here(rw)").unwrap();
        assert_eq!(
            r.access("127.0.0.1:900".parse().unwrap(), &sys(0, 0)),
            Err(Refusal::NotAllowed)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
