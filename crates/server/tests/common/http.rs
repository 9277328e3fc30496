//! The admin API from the tests' side: JSON calls with an optional token, the
//! analytics helpers that wait for sealed seconds, and NFS clients bound to a chosen
//! loopback source address (127.0.0.2 is a second client on one machine).

use super::Client;
use nfs::RpcClient;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub fn client_from(source: &str, server: SocketAddr) -> Client {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    s.bind(&from.into()).unwrap();
    s.connect(&server.into()).unwrap();
    let stream: TcpStream = s.into();
    stream.set_nodelay(true).unwrap();
    Client::new(RpcClient::from_stream(stream))
}

pub struct Api {
    pub addr: SocketAddr,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Api {
        Api { addr, token: None }
    }

    fn auth<B>(&self, r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => r.header("authorization", format!("Bearer {t}")),
            None => r,
        }
    }

    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    pub fn text(&self, path: &str) -> (u16, String) {
        let mut r = self
            .auth(Self::agent().get(&format!("http://{}{path}", self.addr)))
            .call()
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let (code, text) = self.text(path);
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.send(
            Self::agent().post(&format!("http://{}{path}", self.addr)),
            body,
        )
    }

    pub fn put(&self, path: &str, body: &str) -> (u16, Value) {
        self.send(
            Self::agent().put(&format!("http://{}{path}", self.addr)),
            body,
        )
    }

    fn send(&self, r: ureq::RequestBuilder<ureq::typestate::WithBody>, body: &str) -> (u16, Value) {
        let mut r = self
            .auth(r)
            .header("content-type", "application/json")
            .send(body.as_bytes())
            .unwrap();
        let code = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn delete(&self, path: &str) -> u16 {
        self.auth(Self::agent().delete(&format!("http://{}{path}", self.addr)))
            .call()
            .unwrap()
            .status()
            .as_u16()
    }

    pub fn enable(&self, name: &str) -> u64 {
        let (code, v) = self.post(
            "/api/v1/analytics/datasets",
            &serde_json::json!({ "name": name }).to_string(),
        );
        assert_eq!(code, 201, "{v}");
        v["since"].as_u64().unwrap()
    }

    /// The dataset's points from `start` on, summed: (total, breakdown, buckets).
    pub fn sum(&self, name: &str, start: u64) -> (u64, BTreeMap<String, u64>, u64) {
        let q = format!(
            "/api/v1/analytics/data?name={}&start={start}&end={}&resolution=second",
            urlencode(name),
            u64::MAX / 2
        );
        let (code, v) = self.get(&q);
        assert_eq!(code, 200, "{v}");
        let mut total = 0;
        let mut keys = BTreeMap::new();
        let mut in_buckets = 0;
        for p in v["points"].as_array().unwrap() {
            total += p["total"].as_u64().unwrap();
            for k in p["breakdown"].as_array().into_iter().flatten() {
                *keys
                    .entry(k["key"].as_str().unwrap().to_string())
                    .or_default() += k["count"].as_u64().unwrap();
            }
            for b in p["buckets"].as_array().into_iter().flatten() {
                in_buckets += b["count"].as_u64().unwrap();
            }
        }
        (total, keys, in_buckets)
    }

    /// Waits until the dataset's total reaches `want` (seconds are sealed a couple of
    /// seconds after they end), then returns the sums.
    pub fn settled(&self, name: &str, start: u64, want: u64) -> (u64, BTreeMap<String, u64>, u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.sum(name, start);
            if r.0 >= want || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    /// Waits until the breakdown's `key` reaches `want`, then returns the sums. A
    /// total can reach a figure early when other keys count more than expected.
    pub fn settled_key(
        &self,
        name: &str,
        start: u64,
        key: &str,
        want: u64,
    ) -> (u64, BTreeMap<String, u64>, u64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self.sum(name, start);
            if r.1.get(key).copied().unwrap_or(0) >= want || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
