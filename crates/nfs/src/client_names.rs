//! Host names and netgroups in export rules, turned into addresses for matching.
//!
//! A host name is resolved forward (the system resolver: /etc/hosts, then DNS, as
//! `getaddrinfo` does) and its addresses are kept for `FRESH`; the next call after
//! that resolves again on the calling thread. A name that stops resolving keeps its
//! last addresses for `STALE_LIMIT` (a DNS outage does not lock clients out at once),
//! then matches nobody: the failure mode is closed, never open. Wildcard names
//! (`*.example.org`) are refused when the rules are parsed: they need reverse lookups,
//! which would let whoever controls a PTR record choose its own access.
//!
//! A netgroup (`@name`) is read from the netgroup file (`/etc/netgroup`, or the file
//! named by `SHOAL_NETGROUP_FILE`): lines `name member...`, where a member is a triple
//! `(host,user,domain)` (only the host counts; an empty host matches nobody here) or
//! another group's name, followed to any depth without loops. The file is read again
//! when its modification time changes. Hosts of a netgroup resolve as above.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// How long resolved addresses are used before resolving again.
pub const FRESH: Duration = Duration::from_secs(60);
/// How long the last addresses of a name that no longer resolves are still used.
pub const STALE_LIMIT: Duration = Duration::from_secs(600);

struct Resolved {
    at: Instant,
    /// When the name last resolved (the addresses are from then).
    ok_at: Option<Instant>,
    addrs: Arc<Vec<IpAddr>>,
}

#[derive(Default)]
struct Netgroups {
    path: PathBuf,
    modified: Option<SystemTime>,
    /// Group -> its members as written (triples' hosts, or other groups' names).
    groups: HashMap<String, Vec<Member>>,
}

#[derive(Clone)]
enum Member {
    Host(String),
    Group(String),
}

fn cache() -> &'static Mutex<HashMap<String, Resolved>> {
    static C: OnceLock<Mutex<HashMap<String, Resolved>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn netgroups() -> &'static Mutex<Netgroups> {
    static N: OnceLock<Mutex<Netgroups>> = OnceLock::new();
    N.get_or_init(Default::default)
}

/// Whether `name` is a host name an export rule may hold: letters, digits, `-` and
/// `.`, labels not starting or ending with `-`.
pub fn valid_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The addresses of host `name` (see the module comment for caching and failures).
pub fn addresses_of(name: &str) -> Arc<Vec<IpAddr>> {
    let now = Instant::now();
    if let Some(r) = cache().lock().unwrap().get(name) {
        if now.duration_since(r.at) < FRESH {
            return r.addrs.clone();
        }
    }
    let found: Option<Vec<IpAddr>> = (name, 0u16)
        .to_socket_addrs()
        .ok()
        .map(|a| a.map(|s| s.ip()).collect());
    let mut c = cache().lock().unwrap();
    let entry = c.entry(name.to_string()).or_insert(Resolved {
        at: now,
        ok_at: None,
        addrs: Arc::new(Vec::new()),
    });
    entry.at = now;
    match found {
        Some(addrs) if !addrs.is_empty() => {
            entry.ok_at = Some(now);
            entry.addrs = Arc::new(addrs);
        }
        _ => {
            let stale = entry
                .ok_at
                .is_none_or(|ok| now.duration_since(ok) > STALE_LIMIT);
            tracing::warn!(
                host = name,
                keeping = !stale,
                "an export rule's host name does not resolve"
            );
            if stale {
                entry.addrs = Arc::new(Vec::new());
            }
        }
    }
    entry.addrs.clone()
}

/// The hosts of netgroup `group`, nested groups followed (empty when the group or
/// the file does not exist).
pub fn netgroup_hosts(group: &str) -> Vec<String> {
    let mut n = netgroups().lock().unwrap();
    let path = std::env::var_os("SHOAL_NETGROUP_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/netgroup"));
    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    if n.path != path || n.modified != modified {
        n.groups = std::fs::read_to_string(&path)
            .map(|t| parse_netgroups(&t))
            .unwrap_or_default();
        n.path = path;
        n.modified = modified;
    }
    let mut hosts = Vec::new();
    let mut seen = HashSet::new();
    let mut todo = vec![group.to_string()];
    while let Some(g) = todo.pop() {
        if !seen.insert(g.clone()) {
            continue;
        }
        for m in n.groups.get(&g).into_iter().flatten() {
            match m {
                Member::Host(h) => hosts.push(h.clone()),
                Member::Group(sub) => todo.push(sub.clone()),
            }
        }
    }
    hosts
}

fn parse_netgroups(text: &str) -> HashMap<String, Vec<Member>> {
    let mut out = HashMap::new();
    // Lines may continue with a trailing backslash.
    let joined = text.replace("\\\n", " ");
    for line in joined.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        let rest = rest.join(" ");
        let mut members = Vec::new();
        let mut s = rest.as_str();
        while !s.is_empty() {
            s = s.trim_start();
            if let Some(inner) = s.strip_prefix('(') {
                let end = inner.find(')').unwrap_or(inner.len());
                let host = inner[..end].split(',').next().unwrap_or("").trim();
                if !host.is_empty() && host != "-" {
                    members.push(Member::Host(host.to_string()));
                }
                s = inner.get(end + 1..).unwrap_or("");
            } else {
                let end = s.find(char::is_whitespace).unwrap_or(s.len());
                if end > 0 {
                    members.push(Member::Group(s[..end].to_string()));
                }
                s = &s[end..];
            }
        }
        out.insert(name.to_string(), members);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netgroup_files_parse_with_nesting_and_continuations() {
        let g = parse_netgroups(
            "# comment\nservers (web1,,) (db1,-,example) \\\n  (,alice,)\nall servers (lab1,,)\n",
        );
        let hosts = |name: &str| -> Vec<String> {
            g[name]
                .iter()
                .map(|m| match m {
                    Member::Host(h) => format!("host:{h}"),
                    Member::Group(x) => format!("group:{x}"),
                })
                .collect()
        };
        assert_eq!(hosts("servers"), ["host:web1", "host:db1"]);
        assert_eq!(hosts("all"), ["group:servers", "host:lab1"]);
    }

    #[test]
    fn host_names_are_checked_and_resolved() {
        assert!(valid_host_name("nas-1.example.org"));
        for bad in ["", "*.example.org", "-a.b", "a..b", "a_b"] {
            assert!(!valid_host_name(bad), "{bad}");
        }
        // /etc/hosts answers for localhost: no query leaves the machine.
        assert!(addresses_of("localhost").contains(&"127.0.0.1".parse().unwrap()));
    }
}
