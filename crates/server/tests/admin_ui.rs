//! The admin API around the browser UI: login (sessions, the local token, the
//! cookie), the embedded UI assets, worksheets and analytics history that outlive a
//! restart, and the sampled statistics (CPU, ARC, devices, intent log, txg).

mod common;

use common::http::{client_from, urlencode, Api};
use common::TestServer;
use serde_json::Value;
use server::config::LoginMode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn wait_until_second(t: u64) {
    while unix_now() < t {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `path` with a raw header; (status, headers, body).
fn raw(
    api: &Api,
    method: &str,
    path: &str,
    header: Option<(&str, &str)>,
    body: Option<&str>,
) -> (u16, ureq::http::HeaderMap, String) {
    let url = format!("http://{}{path}", api.addr);
    let agent = Api::agent();
    let mut r = match (method, body) {
        ("GET", _) => {
            let mut b = agent.get(&url);
            if let Some((k, v)) = header {
                b = b.header(k, v);
            }
            b.call().unwrap()
        }
        (_, body) => {
            let mut b = agent.post(&url).header("content-type", "application/json");
            if let Some((k, v)) = header {
                b = b.header(k, v);
            }
            b.send(body.unwrap_or("{}").as_bytes()).unwrap()
        }
    };
    let headers = r.headers().clone();
    (
        r.status().as_u16(),
        headers,
        r.body_mut().read_to_string().unwrap(),
    )
}

#[test]
fn login_guards_the_api_while_the_ui_assets_stay_open() {
    let configure: common::Configure = Box::new(|c| c.api.login = LoginMode::Required);
    // The password must exist before a daemon that requires a login starts.
    let server = {
        let probe = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            TestServer::start_configured(
                "*(rw)",
                Some(Box::new(|c| c.api.login = LoginMode::Required)),
            )
        }));
        assert!(
            probe.is_err(),
            "a daemon requiring a login started without a password"
        );
        let mut s = TestServer::start("*(rw)");
        server::auth::set_password(&s.state_dir(), "correct horse battery").unwrap();
        s.configure = Some(configure);
        s.restart();
        s
    };
    let api = Api::new(server.api_addr());

    let (code, v) = api.get("/api/v1/status");
    assert_eq!(code, 401, "{v}");
    assert!(v["error"].as_str().unwrap().contains("log in"));
    assert_eq!(api.text("/metrics").0, 401);
    let (code, v) = api.get("/api/v1/session");
    assert_eq!(
        (
            code,
            v["login_required"].as_bool(),
            v["authenticated"].as_bool()
        ),
        (200, Some(true), Some(false))
    );
    // The UI itself loads, so it can show its login form.
    let (code, headers, body) = raw(&api, "GET", "/", None, None);
    assert_eq!(code, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(body.contains("/ui/app.js"));
    let (code, headers, js) = raw(&api, "GET", "/ui/app.js", None, None);
    assert_eq!(code, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    assert!(js.len() > 1000, "the UI bundle is {} bytes", js.len());
    assert_eq!(raw(&api, "GET", "/ui/app.css", None, None).0, 200);

    let (code, _, body) = raw(
        &api,
        "POST",
        "/api/v1/login",
        None,
        Some(r#"{"password":"wrong horse"}"#),
    );
    assert_eq!(code, 401, "{body}");
    let (code, _, body) = raw(
        &api,
        "POST",
        "/api/v1/login",
        None,
        Some(r#"{"password":5}"#),
    );
    assert_eq!(code, 400, "{body}");
    let (code, headers, body) = raw(
        &api,
        "POST",
        "/api/v1/login",
        None,
        Some(r#"{"password":"correct horse battery"}"#),
    );
    assert_eq!(code, 200, "{body}");
    let token = serde_json::from_str::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let cookie = headers["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with(&format!("shoal_session={token};")) && cookie.contains("HttpOnly"),
        "{cookie}"
    );

    // The session opens the API as a cookie and as a bearer token.
    let (code, _, _) = raw(
        &api,
        "GET",
        "/api/v1/status",
        Some(("cookie", &format!("shoal_session={token}"))),
        None,
    );
    assert_eq!(code, 200);
    let bearer = Api {
        addr: api.addr,
        token: Some(token.clone()),
    };
    assert_eq!(bearer.get("/api/v1/pools").0, 200);
    assert_eq!(bearer.get("/api/v1/session").1["authenticated"], true);
    // The local token (what the CLI and a local Prometheus use) opens it too.
    let local = server::auth::local_token(&server.state_dir()).unwrap();
    let (code, text) = Api {
        addr: api.addr,
        token: Some(local),
    }
    .text("/metrics");
    assert_eq!(code, 200);
    assert!(
        text.contains("shoal_nfs_operations_total") || text.contains("shoal_network_bytes_total")
    );
    // After logout the session no longer opens anything.
    let (code, headers, _) = raw(
        &api,
        "POST",
        "/api/v1/logout",
        Some(("authorization", &format!("Bearer {token}"))),
        None,
    );
    assert_eq!(code, 204);
    assert!(headers["set-cookie"]
        .to_str()
        .unwrap()
        .contains("Max-Age=0"));
    assert_eq!(bearer.get("/api/v1/pools").0, 401);
}

#[test]
fn worksheets_and_history_outlive_a_restart() {
    let mut server = TestServer::start("127.0.0.0/8(rw,no_root_squash,insecure)");
    let api = Api::new(server.api_addr());
    let by_client = "nfs3.ops[client]";
    let (code, v) = api.put(
        "/api/v1/analytics/worksheets/reads",
        &serde_json::json!({"datasets": ["nfs3.ops[client]", "nfs3.ops[latency]", "nfs3.ops[client]"]}).to_string(),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["datasets"],
        serde_json::json!([by_client, "nfs3.ops[latency]"])
    );
    let (code, v) = api.put(
        "/api/v1/analytics/worksheets/bad%2Fname",
        r#"{"datasets":[]}"#,
    );
    assert_eq!(code, 400, "{v}");
    let (code, v) = api.put(
        "/api/v1/analytics/worksheets/x",
        r#"{"datasets":["nfs3.ops[colour]"]}"#,
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        api.get("/api/v1/analytics/worksheets")
            .1
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let since = api
        .get("/api/v1/analytics/datasets")
        .1
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == by_client)
        .unwrap()["since"]
        .as_u64()
        .unwrap();
    wait_until_second(since);
    let mut one = client_from("127.0.0.1", server.addr);
    let (st, root) = one.mount("/tp/share");
    assert_eq!(st, 0);
    let (st, fh) = one.create(&root, "f");
    assert_eq!(st, 0);
    assert_eq!(one.write(&fh, 0, &[1u8; 4096], 2).0, 0);
    let reads = 25u64;
    for _ in 0..reads {
        assert_eq!(one.read(&fh, 0, 4096).0, 0);
    }
    // Everything up to now is sealed a couple of seconds later.
    let loaded = unix_now();
    while api.get("/api/v1/analytics/status").1["sealed_upto"]
        .as_u64()
        .is_none_or(|s| s < loaded)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (total, keys, _) = api.sum(by_client, since);
    assert!(total >= reads + 2, "{total}");
    assert_eq!(keys["127.0.0.1"], total);
    let end = api.get("/api/v1/analytics/status").1["sealed_upto"]
        .as_u64()
        .unwrap();
    let query = |api: &Api, name: &str, resolution: &str| {
        let (code, v) = api.get(&format!(
            "/api/v1/analytics/data?name={}&start={}&end={end}&resolution={resolution}",
            urlencode(name),
            since - 120
        ));
        assert_eq!(code, 200, "{v}");
        v
    };
    let before = query(&api, by_client, "second");
    let before_builtin = query(&api, "nfs3.ops[op]", "second");
    let before_minutes = query(&api, by_client, "minute");
    assert_eq!(before["summary"]["total"].as_u64().unwrap(), total);

    server.restart();
    let api = Api::new(server.api_addr());
    let sheets = api.get("/api/v1/analytics/worksheets").1;
    assert_eq!(sheets[0]["name"], "reads");
    assert!(api
        .get("/api/v1/analytics/datasets")
        .1
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["name"] == by_client && d["since"] == since));
    // The same range reads back the same, at every resolution, from disk.
    assert_eq!(query(&api, by_client, "second")["points"], before["points"]);
    assert_eq!(
        query(&api, "nfs3.ops[op]", "second")["points"],
        before_builtin["points"]
    );
    assert_eq!(
        query(&api, by_client, "minute")["summary"]["total"],
        before_minutes["summary"]["total"]
    );
    assert!(
        std::fs::read_dir(server.state_dir().join("analytics"))
            .unwrap()
            .count()
            > 3
    );

    // A removed worksheet is gone after a restart; its datasets stay until removed.
    assert_eq!(api.delete("/api/v1/analytics/worksheets/reads"), 204);
    assert_eq!(api.delete("/api/v1/analytics/worksheets/reads"), 404);
    assert_eq!(
        api.delete(&format!(
            "/api/v1/analytics/datasets?name={}",
            urlencode(by_client)
        )),
        204
    );
    server.restart();
    let api = Api::new(server.api_addr());
    assert!(api
        .get("/api/v1/analytics/worksheets")
        .1
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(
        api.get(&format!(
            "/api/v1/analytics/data?name={}",
            urlencode(by_client)
        ))
        .0,
        404
    );
}

#[test]
fn sampled_statistics_see_cpu_arc_devices_log_and_txg() {
    let server = TestServer::start("127.0.0.0/8(rw,no_root_squash,insecure)");
    let api = Api::new(server.api_addr());
    let start = unix_now();
    let mut one = client_from("127.0.0.1", server.addr);
    let (_, root) = one.mount("/tp/share");
    let (st, fh) = one.create(&root, "data");
    assert_eq!(st, 0);
    let block = vec![9u8; 65536];
    let deadline = Instant::now() + Duration::from_secs(90);
    // Stable writes (intent log commits) and reads until every statistic has seen
    // some: txgs sync on their own timer.
    let wanted = [
        ("cpu.daemon[work]", Some("rpc")),
        ("cpu.utilization[mode]", Some("idle")),
        ("net.interface.bytes[direction]", Some("in")),
        ("arc.accesses[result]", Some("hit")),
        ("io.utilization[device]", None),
        ("zil.commits[latency]", None),
        ("txg.syncs[latency]", None),
        ("pool.used", None),
        ("arc.size", None),
    ];
    let mut missing: Vec<&str> = wanted.iter().map(|w| w.0).collect();
    let mut i = 0u64;
    while !missing.is_empty() && Instant::now() < deadline {
        assert_eq!(one.write(&fh, (i % 64) * 65536, &block, 2).0, 0);
        assert_eq!(one.read(&fh, (i % 64) * 65536, 65536).0, 0);
        i += 1;
        if i % 50 == 0 {
            missing.retain(|name| {
                let (total, keys, buckets) = api.sum(name, start);
                let want_key = wanted.iter().find(|w| w.0 == *name).unwrap().1;
                let seen =
                    total > 0 && want_key.is_none_or(|k| keys.get(k).copied().unwrap_or(0) > 0);
                // Latency datasets: every commit or sync lands in a heatmap bucket.
                let whole = !name.ends_with("[latency]") || buckets == total;
                !(seen && whole)
            });
        }
    }
    assert!(missing.is_empty(), "no samples for {missing:?}");
    // Gauges read as levels, shown with their divisor: CPU is percent of one CPU.
    let stats = api.get("/api/v1/analytics/statistics").1;
    let cpu = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "cpu.daemon")
        .unwrap();
    assert_eq!(
        (cpu["kind"].as_str(), cpu["divisor"].as_u64()),
        (Some("gauge"), Some(10_000))
    );
    let (_, v) = api.get(&format!(
        "/api/v1/analytics/data?name=cpu.daemon%5Bwork%5D&start={start}&end={}",
        unix_now()
    ));
    let avg_percent = v["summary"]["average"].as_f64().unwrap() / 10_000.0;
    assert!(
        avg_percent > 0.0 && avg_percent <= 100.0 * 64.0,
        "{avg_percent}"
    );
    let (code, text) = api.text("/metrics");
    assert_eq!(code, 200);
    // The Grafana dashboard in the repository queries only metrics that exist.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/grafana/shoal.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("shoal_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let family = name.strip_suffix("_bucket").unwrap_or(&name);
                assert!(
                    text.contains(&format!("# TYPE {family} ")),
                    "the dashboard's panel '{}' queries {name}, which /metrics lacks",
                    panel["title"]
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 14, "{queried}");
    for family in [
        "shoal_cpu_seconds_total{work=\"rpc\"}",
        "shoal_device_busy_seconds_total{pool=\"tp\"",
        "shoal_intent_log_commit_duration_seconds_count{pool=\"tp\"}",
    ] {
        assert!(text.contains(family), "{family} missing");
    }
}

#[test]
fn https_with_a_configured_certificate_and_nothing_in_clear() {
    // A self-signed end-entity certificate for localhost, made by openssl.
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl (.ci/test-deps.sh installs it)");
    assert!(made.status.success(), "{made:?}");
    let (c, k) = (cert.clone(), key.clone());
    let server = TestServer::start_configured(
        "*(rw)",
        Some(Box::new(move |config| {
            config.api.tls_cert = Some(c.clone());
            config.api.tls_key = Some(k.clone());
        })),
    );
    let port = server.api_addr().port();
    let curl = |url: &str| {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&cert)
            .arg(url)
            .output()
            .expect("curl (.ci/test-deps.sh installs it)")
    };
    let out = curl(&format!("https://localhost:{port}/api/v1/session"));
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["login_required"], false);
    let page = curl(&format!("https://localhost:{port}/"));
    assert!(String::from_utf8_lossy(&page.stdout).contains("/ui/app.js"));
    // Plain HTTP gets no answer from the HTTPS port.
    let clear = curl(&format!("http://127.0.0.1:{port}/api/v1/session"));
    assert!(
        !clear.status.success()
            || !String::from_utf8_lossy(&clear.stdout).contains("login_required"),
        "{clear:?}"
    );
    // The daemon file tells the CLI which certificate to trust.
    let file: Value =
        serde_json::from_slice(&std::fs::read(server.state_dir().join("daemon.json")).unwrap())
            .unwrap();
    assert_eq!(file["tls_cert"].as_str().unwrap(), cert.to_str().unwrap());
}
