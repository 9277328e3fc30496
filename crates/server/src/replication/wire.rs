//! The request that carries a replication stream: HTTP/1.1 written by hand over
//! TCP, or over TLS trusting only the target's certificate.
//!
//! Why not the HTTP client used for the small calls: the stream is the whole cost of a
//! run, and that client copied every byte three times on its way out (into its read
//! buffer, into a chunk, into its output buffer) before TLS copied it once more; a
//! profile put those copies at a sixth of a replication's CPU. Here each 1 MiB chunk
//! goes from the stream writer's buffer straight to the TLS record layer (or the
//! socket): `Transfer-Encoding: chunked`, one chunk per buffer, then the answer is
//! read back (its `Content-Length` body, at most 1 MiB).
//!
//! A chunk source that fails ends the request without its last chunk, so the target
//! sees a cut body and refuses the stream.

use super::Target;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// How a target is reached.
pub(crate) struct Wire {
    address: String,
    host: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

/// The answer: status and body.
pub(crate) struct Answer {
    pub status: u16,
    pub body: String,
}

const MAX_ANSWER: usize = 1 << 20;

impl Wire {
    pub(crate) fn new(t: &Target) -> Result<Wire, String> {
        let host = match t.address.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']').to_string(),
            None => return Err(format!("target '{}': address without a port", t.name)),
        };
        let tls = match &t.certificate {
            None => None,
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
                    let cert =
                        cert.map_err(|e| format!("target '{}': its certificate: {e}", t.name))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("target '{}': its certificate: {e}", t.name))?;
                }
                if roots.is_empty() {
                    return Err(format!("target '{}': its certificate holds no PEM", t.name));
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("TLS: {e}"))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                Some(Arc::new(config))
            }
        };
        Ok(Wire {
            address: t.address.clone(),
            host,
            tls,
        })
    }

    /// POSTs `path` with `headers` and the chunks `next` gives until `None`;
    /// `sent(n)` after each chunk of `n` bytes went out (to count and pace).
    pub(crate) fn post_chunked(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        next: &mut dyn FnMut() -> Option<std::io::Result<Vec<u8>>>,
        sent: &mut dyn FnMut(usize),
    ) -> Result<Answer, String> {
        let tcp = TcpStream::connect(&self.address)
            .map_err(|e| format!("connecting to {}: {e}", self.address))?;
        let _ = tcp.set_nodelay(true);
        // A target that stops answering ends the run instead of hanging it.
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(3600)));
        let _ = tcp.set_write_timeout(Some(Duration::from_secs(600)));
        match &self.tls {
            None => exchange(tcp, &self.host, path, headers, next, sent),
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| format!("'{}' as a TLS name: {e}", self.host))?;
                let conn = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(|e| format!("TLS: {e}"))?;
                exchange(
                    rustls::StreamOwned::new(conn, tcp),
                    &self.host,
                    path,
                    headers,
                    next,
                    sent,
                )
            }
        }
    }
}

fn exchange<S: Read + Write>(
    mut s: S,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    next: &mut dyn FnMut() -> Option<std::io::Result<Vec<u8>>>,
    sent: &mut dyn FnMut(usize),
) -> Result<Answer, String> {
    let io = |e: std::io::Error| format!("sending the stream: {e}");
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).map_err(io)?;
    while let Some(chunk) = next() {
        let chunk = chunk.map_err(|e| format!("the stream failed part way: {e}"))?;
        if chunk.is_empty() {
            continue;
        }
        s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .map_err(io)?;
        s.write_all(&chunk).map_err(io)?;
        s.write_all(b"\r\n").map_err(io)?;
        sent(chunk.len());
    }
    s.write_all(b"0\r\n\r\n").map_err(io)?;
    s.flush().map_err(io)?;
    read_answer(&mut s)
}

fn read_answer(s: &mut dyn Read) -> Result<Answer, String> {
    let io = |e: std::io::Error| format!("reading the answer: {e}");
    let mut buf = Vec::new();
    let mut piece = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > 64 << 10 {
            return Err("an answer head longer than 64 KiB".into());
        }
        let n = s.read(&mut piece).map_err(io)?;
        if n == 0 {
            return Err("the target closed the connection without an answer".into());
        }
        buf.extend_from_slice(&piece[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {}", head.lines().next().unwrap_or("")))?;
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_ANSWER);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = s.read(&mut piece).map_err(io)?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&piece[..n]);
    }
    body.truncate(length);
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
