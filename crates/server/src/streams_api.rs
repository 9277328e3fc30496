//! Snapshot streams over the admin API: `GET /api/v1/send/{snapshot}` answers with the
//! stream (`application/octet-stream`, produced while it is sent; `?replicate=true`:
//! every snapshot up to it, one stream after another), `POST
//! /api/v1/receive/{filesystem}` takes one or several as its body and answers with
//! what arrived.
//! `?resumable=true` keeps what arrived when the stream is cut, and `GET
//! /api/v1/send-resume/{filesystem}?token=T` sends the rest (`receive_tokens`).
//! `shoal send` and `shoal receive` use them while the daemon runs.
//!
//! The stream is produced and consumed on blocking threads and crosses to the HTTP
//! side through bounded channels (a few 1 MiB chunks), so a multi-GiB stream never sits
//! in memory. A send that fails part way aborts the response, so the receiver sees a
//! truncated stream and refuses it.

use crate::api::{ApiError, Params, Shared};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;

/// `GET /send/{snapshot}?from=...`: the base of an incremental, `pool/fs@name` or
/// `@name`.
#[derive(Debug, Deserialize)]
pub struct SendQuery {
    from: Option<String>,
    /// Every snapshot up to this one, each as an incremental on the one before
    /// (`Datasets::replicated_send_ids`).
    replicate: Option<bool>,
}

type Chunk = Result<Bytes, std::io::Error>;

/// Request body bytes handed to the reading thread at once.
const GATHER: usize = 256 << 10;

/// A writer that gathers what it is given into pieces of about `GATHERED_CHUNK` and
/// hands each whole piece to `send` (and the rest at `flush`): a snapshot stream's
/// writer hands over each big payload by itself, and a channel message, an HTTP
/// chunk or a frame per 128 KiB costs more than the copy. The daemon's
/// `GET /send` and replication's sender both write through it.
pub(crate) struct GatheringWriter<F: FnMut(Vec<u8>) -> std::io::Result<()>> {
    send: F,
    buf: Vec<u8>,
}

const GATHERED_CHUNK: usize = 1 << 20;

impl<F: FnMut(Vec<u8>) -> std::io::Result<()>> GatheringWriter<F> {
    pub(crate) fn new(send: F) -> Self {
        GatheringWriter {
            send,
            buf: Self::empty_piece(),
        }
    }

    /// Room for a whole piece and the payload that fills it past `GATHERED_CHUNK`.
    fn empty_piece() -> Vec<u8> {
        Vec::with_capacity(GATHERED_CHUNK + (128 << 10))
    }
}

impl<F: FnMut(Vec<u8>) -> std::io::Result<()>> std::io::Write for GatheringWriter<F> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= GATHERED_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.buf, Self::empty_piece());
        (self.send)(full)
    }
}

pub async fn send(
    State(s): State<Shared>,
    Path(snapshot): Path<String>,
    Params(q): Params<SendQuery>,
) -> Result<Response, ApiError> {
    let ds = s.datasets_of(&snapshot)?;
    // Names first, so a wrong one is a 404 rather than an empty stream.
    let streams = if q.replicate.unwrap_or(false) {
        ds.replicated_send_ids(&snapshot, q.from.as_deref())?
    } else {
        vec![ds.send_ids(&snapshot, q.from.as_deref())?]
    };
    let streams = streams
        .into_iter()
        .map(|(id, from)| (id, from, None))
        .collect();
    Ok(stream_response(ds, snapshot, streams))
}

/// `GET /send-resume/{filesystem}?token=T`: the rest of the stream a resumable receive
/// was cut in, from the point its token names (`receive_tokens`); the snapshots are
/// found by identity in the filesystem's pool.
#[derive(Debug, Deserialize)]
pub struct ResumeQuery {
    token: String,
}

pub async fn send_resumed(
    State(s): State<Shared>,
    Path(filesystem): Path<String>,
    Params(q): Params<ResumeQuery>,
) -> Result<Response, ApiError> {
    let ds = s.datasets_of(&filesystem)?;
    let point = crate::receive_tokens::parse_token(&q.token)?;
    let (to, from) = crate::receive_tokens::resumed_ids(&ds, &point)?;
    Ok(stream_response(
        ds,
        format!("the rest of {filesystem}'s stream"),
        vec![(to, from, Some(point.at))],
    ))
}

/// Streams (snapshot, base, resume position) one after another as the response body.
fn stream_response(
    ds: std::sync::Arc<fs::Datasets>,
    what: String,
    streams: Vec<(u64, Option<u64>, Option<pool::send::Position>)>,
) -> Response {
    let snapshot = what;
    let (tx, rx) = mpsc::channel::<Chunk>(4);
    tokio::task::spawn_blocking(move || {
        let mut w = GatheringWriter::new(|chunk| {
            tx.blocking_send(Ok(Bytes::from(chunk))).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client went away")
            })
        });
        for (id, from_id, at) in streams {
            if let Err(e) = pool::send::writer::send_from(ds.pool(), id, from_id, at, &mut w) {
                tracing::warn!("send of {snapshot} failed part way: {e}");
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                return;
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .body(Body::from_stream(body))
        .expect("a valid response")
}

/// Reads the request body's frames from a channel, a batch at a time; it is its own
/// `BufRead` (no second buffer, so no second copy).
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<Batch>,
    batch: std::collections::VecDeque<Bytes>,
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        read_from_buffer(self, buf)
    }
}

/// `Read::read` of a reader that is its own `BufRead`: from what it holds.
pub(crate) fn read_from_buffer(
    r: &mut dyn std::io::BufRead,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let have = r.fill_buf()?;
    let n = buf.len().min(have.len());
    buf[..n].copy_from_slice(&have[..n]);
    r.consume(n);
    Ok(n)
}

impl std::io::BufRead for ChannelReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.batch.front().is_none_or(|b| b.is_empty()) {
            if self.batch.pop_front().is_some() {
                continue;
            }
            match self.rx.blocking_recv() {
                None => return Ok(&[]),
                Some(batch) => self.batch = batch?.into(),
            }
        }
        Ok(self.batch.front().expect("a frame"))
    }

    fn consume(&mut self, n: usize) {
        if let Some(front) = self.batch.front_mut() {
            let _ = front.split_to(n.min(front.len()));
        }
    }
}

/// Frames handed to the reading thread together.
type Batch = Result<Vec<Bytes>, std::io::Error>;

/// The request body as a blocking reader: a task forwards its frames through a
/// bounded channel in batches of at least `GATHER` bytes (a frame is a TLS record, a
/// few KiB, and a wake-up of the reading thread per frame cost more CPU than the
/// transfer). Once nothing reads any more (refused before or during the receive),
/// the rest of the body is read and dropped, so the client, still sending, gets the
/// answer rather than a reset connection. Await the handle before answering.
pub(crate) fn body_reader(body: Body) -> (tokio::task::JoinHandle<()>, ChannelReader) {
    let (tx, rx) = mpsc::channel::<Batch>(4);
    let pump = tokio::spawn(async move {
        let mut frames = body.into_data_stream();
        let mut forwarding = true;
        let mut batch: Vec<Bytes> = Vec::new();
        let mut batched = 0usize;
        loop {
            let (send, last) = match frames.next().await {
                Some(Ok(b)) => {
                    batched += b.len();
                    batch.push(b);
                    if batched < GATHER {
                        continue;
                    }
                    (vec![Ok(std::mem::take(&mut batch))], false)
                }
                // What came before an error goes first.
                Some(Err(e)) => (
                    vec![
                        Ok(std::mem::take(&mut batch)),
                        Err(std::io::Error::other(e)),
                    ],
                    true,
                ),
                None => (vec![Ok(std::mem::take(&mut batch))], true),
            };
            batched = 0;
            for b in send {
                if forwarding && tx.send(b).await.is_err() {
                    forwarding = false;
                }
            }
            if last {
                break;
            }
        }
    });
    (
        pump,
        ChannelReader {
            rx,
            batch: Default::default(),
        },
    )
}

/// `?resumable=true`: keep what arrives when the stream ends early, with a token to
/// resume from (`receive_tokens`).
#[derive(Debug, Deserialize)]
pub struct ReceiveQuery {
    resumable: Option<bool>,
}

pub async fn receive(
    State(s): State<Shared>,
    Path(dataset): Path<String>,
    Params(q): Params<ReceiveQuery>,
    body: Body,
) -> Result<(StatusCode, Json<pool::send::receiver::ReceiveSummary>), ApiError> {
    let (pump, reader) = body_reader(body);
    let received = receive_from(&s, dataset, q.resumable.unwrap_or(false), reader).await;
    let _ = pump.await;
    Ok((StatusCode::CREATED, Json(received?)))
}

async fn receive_from(
    s: &Shared,
    dataset: String,
    resumable: bool,
    reader: ChannelReader,
) -> Result<pool::send::receiver::ReceiveSummary, ApiError> {
    let ds = s.datasets_of(&dataset)?;
    s.refuse_if_shared(&dataset, "before receiving into it")?;
    s.refuse_if_exported(&dataset)?;
    let state_dir = s.state_dir.clone();
    tokio::task::spawn_blocking(move || -> Result<_, ApiError> {
        let mut reader = reader;
        let all = if resumable {
            crate::receive_tokens::receive(&state_dir, &ds, &dataset, &mut reader)?
        } else {
            ds.receive_all(&dataset, &mut reader)?
        };
        ds.pool().sync()?;
        Ok(pool::send::receiver::ReceiveSummary::of_all(all).expect("at least one stream"))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}
