//! One client connection: frames are read and dispatched in arrival order, take effect in that
//! order (order.rs: a request other than Produce runs alone, after every request before it; a
//! Produce appends as it is read, after the requests before it, while the Produces before it
//! wait for their flush), and are answered in request order. Connections run side by side.
//!
//! What one connection may hold is bounded: one file descriptor (a TLS one too, from its
//! handshake on: tls::SharedSocket), counted by the connection caps; the bytes of requests
//! read and not answered plus responses not written count against the connection's and the
//! broker's budgets (budget.rs), and past either the reader stops reading until responses go
//! out; its partial request is dropped, the connection closed, when it holds more than a fair
//! share of the broker's budget that another connection waits for (budget.rs); a frame must
//! arrive whole within `request_read_timeout_ms` of its first byte, and before a SASL login
//! may be at most `sasl_server_max_receive_size`, refused on its size prefix; a connection
//! with nothing in flight for `connections_max_idle_ms`, or whose client takes none of its
//! response for that long, is closed. When the client closes its side (or sends something
//! undecodable), Fetches still waiting for data are cancelled - nothing is owed to a peer
//! that is gone - while the other responses owed (produce acks) are still sent.

use std::future::Future;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf, Ready};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use super::admission::Admitted;
use super::budget::{Budgets, ByteBudget, Charge};
use super::dispatch::{dispatch, Answer};
use super::handlers::produce::implicit_add;
use super::handlers::ConnectionContext;
use super::handlers::Reply;
use super::log_limit::LogLimit;
use super::low_water::LowWater;
use super::order::RequestOrder;
use super::sasl::{Authenticator, Gate, SaslSettings};
use super::tls::{SharedSocket, Side, Tls};
use crate::auth::authorizer::{Access, ANONYMOUS};
use crate::broker::Broker;
use crate::protocol::frame::{FrameError, FrameReader, FRAME_HEADER_LEN};
use crate::protocol::header::Request;

/// Requests one connection may have in flight before reading pauses. Memory is bounded by
/// the byte budgets (each request is charged its bytes plus `REQUEST_OVERHEAD`); this caps
/// the tasks one connection can have the scheduler juggle. It stays high because produce
/// responses wait for the next group commit and librdkafka pipelines one request per
/// partition per linger (up to 1,000,000 in flight by default): at 128, a client producing
/// to 8 partitions with linger.ms=5 queued behind the cap without bound, and 4096 covers a
/// flush interval of requests for a few hundred partitions. At most 4 MiB of bookkeeping.
const MAX_IN_FLIGHT: usize = 4096;

/// Connections closed for what their clients sent (bad frames, a failed handshake, too large a
/// frame before login): a client doing it in a loop must not flood the log.
static CLOSING: LogLimit = LogLimit::new("connections closed for what their clients sent");

/// Bookkeeping one request costs beyond its bytes (its task, decoded header and queue slot),
/// charged to the budgets so that a flood of tiny requests counts too.
const REQUEST_OVERHEAD: usize = 1024;

/// Most bytes read from the socket at once; the read buffer grows by what arrives.
const READ_CHUNK: usize = 64 * 1024;

/// Request bytes one connection dispatches between two yields to the runtime.
const YIELD_EVERY_BYTES: usize = 1 << 20;

/// Chunks gathered into one write: a response's record slices, well under IOV_MAX (1024).
const IOVECS_PER_WRITE: usize = 64;

/// How often a connection stalled by its budgets checks whether its client has gone.
const CLOSED_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How long a stopping connection, its answers sent, waits for the client to close.
const LINGER: Duration = Duration::from_secs(2);

/// A request handed to its task, in the order the writer answers it.
struct Pending {
    answer: JoinHandle<Answer>,
    /// A Fetch or Metadata request: work only its client wants, so it is cancelled when the
    /// client goes away.
    ends_on_hangup: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum ReadEnd {
    /// The broker is stopping: every response owed is still sent.
    Stopped,
    /// The client closed, broke the protocol, stalled or idled: waiting Fetches are
    /// cancelled, the other responses owed are sent.
    Closed,
}

/// The read side of a connection, and how to tell that its client closed while nothing of
/// it is being read.
pub(crate) trait ReadSide: AsyncRead + Unpin + Send {
    /// Request bytes this side may have taken from the socket and not handed on yet when it
    /// reports that it must wait for the peer.
    const HELD: usize;

    fn hung_up(&self) -> impl Future<Output = ()> + Send + '_;

    fn socket(&self) -> BorrowedFd<'_>;
}

impl ReadSide for OwnedReadHalf {
    const HELD: usize = 0;

    fn hung_up(&self) -> impl Future<Output = ()> + Send + '_ {
        peer_closed(move || self.ready(Interest::READABLE))
    }

    fn socket(&self) -> BorrowedFd<'_> {
        self.as_ref().as_fd()
    }
}

/// A TLS connection's read side: the stream's half, and the socket beneath it (shared with
/// the stream, one descriptor) to watch for the client's close.
pub(crate) struct TlsReadSide {
    half: tokio::io::ReadHalf<TlsStream<tokio::io::BufReader<SharedSocket>>>,
    socket: Arc<TcpStream>,
}

impl AsyncRead for TlsReadSide {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.half).poll_read(cx, buf)
    }
}

impl ReadSide for TlsReadSide {
    /// The TLS stream waits only once rustls has no plaintext left and the buffer beneath it
    /// is empty; rustls has then decrypted every whole record it read and holds at most the
    /// start of one: under its largest wire size (16 KiB of payload, up to 2 KiB of
    /// expansion, a 5-byte header).
    const HELD: usize = 16 * 1024 + 2048 + 5;

    fn hung_up(&self) -> impl Future<Output = ()> + Send + '_ {
        peer_closed(move || self.socket.ready(Interest::READABLE))
    }

    fn socket(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// Where a connection came in: its listener's name and, as its protocol says, its TLS and
/// its SASL settings.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) listener: Arc<str>,
    pub(crate) tls: Option<Arc<Tls>>,
    pub(crate) sasl: Option<Arc<SaslSettings>>,
}

/// Serves a connection accepted on `entry`: the TLS handshake first on an SSL listener
/// (within `request_read_timeout_ms`; a client that fails it is closed), then [`run`].
pub(crate) async fn start(
    broker: Arc<Broker>,
    socket: TcpStream,
    entry: Entry,
    broker_budget: Arc<ByteBudget>,
    stop: watch::Receiver<bool>,
    admitted: Admitted,
) {
    let Ok(peer) = socket.peer_addr() else { return };
    if !within_connection_rate(&broker, peer).await {
        return;
    }
    let timeout = Duration::from_millis(broker.config.request_read_timeout_ms);
    let mut serving = Serving {
        connection: context(&broker, peer, &broker_budget, entry.listener.clone()),
        auth: entry.sasl.map(Authenticator::new),
        principal: ANONYMOUS.into(),
        broker,
        stop,
        admitted,
    };
    let Some(tls) = entry.tls else {
        return serving.run(socket.into_split()).await;
    };
    // One descriptor however far the connection got: it was counted as one when admitted.
    let socket = Arc::new(socket);
    let accepted = tls.accept(SharedSocket(socket.clone()), timeout, Side::Kafka);
    let (stream, principal) = match accepted.await {
        Ok(accepted) => accepted,
        Err(error) => {
            if CLOSING.admit() {
                tracing::info!(%peer, listener = %entry.listener, %error,
                    "closing connection: TLS handshake failed");
            }
            return;
        }
    };
    tracing::debug!(%peer, listener = %entry.listener, %principal, "TLS connection");
    serving.principal = principal;
    let (half, write_half) = tokio::io::split(stream);
    serving
        .run((TlsReadSide { half, socket }, write_half))
        .await;
}

/// Whether a new connection from `peer` may be served: at once within its address's
/// connection_creation_rate quota; past it, after a delay that brings the rate back (at most a
/// second), and closed if the address is still over then (KIP-612).
async fn within_connection_rate(broker: &Broker, peer: std::net::SocketAddr) -> bool {
    let ip = peer.ip().to_string();
    let delay = broker.quotas.connection_delay(&ip);
    if delay.is_zero() {
        return true;
    }
    tokio::time::sleep(delay).await;
    if broker.quotas.connection_still_over(&ip) {
        if CLOSING.admit() {
            tracing::info!(%peer, "closing connection: its address is over its \
                connection_creation_rate quota");
        }
        return false;
    }
    true
}

/// A connection about to be served, its transport aside.
struct Serving {
    broker: Arc<Broker>,
    auth: Option<Authenticator>,
    /// Who the client is without SASL: its certificate's subject, or ANONYMOUS.
    principal: Arc<str>,
    connection: Arc<ConnectionContext>,
    stop: watch::Receiver<bool>,
    /// The connection's place under the connection caps, held until it ends.
    admitted: Admitted,
}

impl Serving {
    /// Serves until the client disconnects, idles or `stop` turns true; then stops reading,
    /// sends the responses owed (see [`ReadEnd`]) and closes.
    async fn run<R, W>(self, (mut read_half, write_half): (R, W))
    where
        R: ReadSide + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let Serving {
            broker,
            mut auth,
            principal,
            connection,
            stop,
            admitted,
        } = self;
        let (queue, replies) = mpsc::channel::<Pending>(MAX_IN_FLIGHT);
        let (hangup, hung_up) = watch::channel(false);
        let idle = Duration::from_millis(broker.config.connections_max_idle_ms);
        let writer = tokio::spawn(write_answers(
            write_half,
            replies,
            hung_up,
            connection.peer,
            idle,
        ));
        let end = read_requests(
            &broker,
            &mut read_half,
            (&mut auth, principal),
            &connection,
            &queue,
            stop,
        )
        .await;
        if end == ReadEnd::Closed {
            let _ = hangup.send(true);
        }
        drop(queue);
        // The writer sends what is owed, then shuts its half down (FIN).
        let _ = writer.await;
        if end == ReadEnd::Stopped {
            linger(&mut read_half).await;
        }
        drop(admitted);
    }
}

/// Reads and discards what the client still sends, until it closes too (or `LINGER`): a
/// socket closed with unread bytes in its receive buffer is reset, and a reset can destroy
/// answers the client has not read yet – it would send again records that were stored.
async fn linger(read_half: &mut (impl AsyncRead + Unpin)) {
    let mut sink = [0u8; 4096];
    let drained = async { while matches!(read_half.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(LINGER, drained).await;
}

/// The ids of the process's connections, each used once.
static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// The context of a new connection: its id, its budgets (sharing `broker_budget` with every
/// other connection) and its Fetch turn.
fn context(
    broker: &Broker,
    peer: std::net::SocketAddr,
    broker_budget: &Arc<ByteBudget>,
    listener: Arc<str>,
) -> Arc<ConnectionContext> {
    Arc::new(ConnectionContext {
        peer,
        id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
        budgets: Budgets::new(
            broker.config.connection_max_inflight_bytes,
            broker_budget.clone(),
        ),
        fetch_turns: Arc::new(Semaphore::new(1)),
        produce_window: Arc::default(),
        listener,
        muted_until: Default::default(),
    })
}

/// What `principal`, connected from the connection's address, may do.
fn connection_access(
    broker: &Broker,
    connection: &Arc<ConnectionContext>,
    principal: Arc<str>,
) -> Arc<Access> {
    let host = connection.peer.ip().to_canonical().to_string();
    Arc::new(Access::new(broker.authorizer.clone(), principal, host))
}

async fn read_requests<R: ReadSide>(
    broker: &Arc<Broker>,
    read_half: &mut R,
    (auth, transport_principal): (&mut Option<Authenticator>, Arc<str>),
    connection: &Arc<ConnectionContext>,
    queue: &mpsc::Sender<Pending>,
    mut stop: watch::Receiver<bool>,
) -> ReadEnd {
    let config = &broker.config;
    let peer = connection.peer;
    let idle = Duration::from_millis(config.connections_max_idle_ms);
    let frame_timeout = Duration::from_millis(config.request_read_timeout_ms);
    let mut frames = FrameReader::new(read_half, config.max_request_bytes);
    // The bytes received and not yet handed to a request: a partial request.
    let mut buffered = Charge::partial(&connection.budgets);
    let mut frame_deadline: Option<Instant> = None;
    let mut low_water = LowWater::new();
    let mut since_yield = 0;
    let mut access = connection_access(broker, connection, transport_principal.clone());
    let mut order = RequestOrder::default();
    loop {
        let mut handed_out = false;
        loop {
            // Before authentication: the size prefix alone decides, before any of the frame is
            // read (reads stop at the end of each frame until then, see below).
            let before_login = auth.as_ref().and_then(Authenticator::frame_limit);
            if let Some(limit) = before_login {
                if let Some(size) = frames.declared_size().filter(|size| *size > limit) {
                    if CLOSING.admit() {
                        tracing::info!(
                            %peer,
                            size,
                            limit,
                            "closing connection: a frame of {size} bytes before authentication, \
                             larger than sasl_server_max_receive_size ({limit})"
                        );
                    }
                    return ReadEnd::Closed;
                }
            }
            if let Some(until) = connection.muted() {
                // A quota throttles the client: its next request waits (Kafka mutes the
                // channel).
                tokio::select! {
                    biased;
                    _ = queue.closed() => return ReadEnd::Closed,
                    _ = stop.changed() => return ReadEnd::Stopped,
                    () = tokio::time::sleep_until(until) => {}
                }
            }
            let frame = match frames.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(error) => {
                    if CLOSING.admit() {
                        tracing::info!(%peer, %error, "closing connection");
                    }
                    return ReadEnd::Closed;
                }
            };
            handed_out = true;
            since_yield += frame.len();
            let mut charge = buffered.split_off(FRAME_HEADER_LEN + frame.len());
            charge.add(REQUEST_OVERHEAD);
            if let Some(auth) = auth.as_mut().filter(|a| a.expects_bare_token()) {
                let gate = auth.bare_token(&frame).await;
                match queue_sasl_answer(gate, charge, queue).await {
                    Some(end) => return end,
                    None => continue,
                }
            }
            let request = match Request::decode(frame) {
                Ok(request) => request,
                Err(error) => {
                    if CLOSING.admit() {
                        tracing::info!(%peer, %error, "closing connection");
                    }
                    return ReadEnd::Closed;
                }
            };
            if let Some(auth) = auth.as_mut() {
                match auth.gate(&request).await {
                    Gate::Pass => {}
                    Gate::Close(reason) => {
                        if CLOSING.admit() {
                            tracing::info!(%peer, reason, "closing connection");
                        }
                        return ReadEnd::Closed;
                    }
                    answer => match queue_sasl_answer(answer, charge, queue).await {
                        Some(end) => return end,
                        None => continue,
                    },
                }
            }
            // A SASL login names the principal (and a renewal keeps it).
            let principal = auth.as_ref().and_then(|a| a.principal());
            if let Some(principal) = principal.filter(|p| *p != access.principal()) {
                access = connection_access(broker, connection, principal.into());
            }
            // Work nobody will read: a Fetch's long poll, a Metadata request's topic creations
            // (auto-creation stops with its request once its client has gone).
            let ends_on_hangup = matches!(request.api_key, ApiKey::Fetch | ApiKey::Metadata);
            let turn = if request.api_key == ApiKey::Produce {
                let mut turn = order.produce();
                // A Produce appends as it is dispatched: not before the requests ahead of it
                // that run alone have finished (InitProducerId, CreateTopics, a Fetch's long
                // poll). Meanwhile nothing more of the connection is read, as in Kafka.
                if !turn.ready() {
                    tokio::select! {
                        biased;
                        _ = queue.closed() => return ReadEnd::Closed,
                        // Not dispatched: its client sees no answer, and nothing was stored.
                        _ = stop.changed() => return ReadEnd::Stopped,
                        () = turn.wait() => {}
                    }
                }
                // The second transaction protocol's producers leave adding the partitions
                // of their batches to the broker (Produce v12+): done before the append.
                tokio::select! {
                    biased;
                    _ = queue.closed() => return ReadEnd::Closed,
                    _ = stop.changed() => return ReadEnd::Stopped,
                    () = implicit_add::add_partitions(broker, &request, &access) => {}
                }
                turn
            } else {
                order.alone()
            };
            let answer = dispatch(broker, request, connection, &access, charge, turn);
            // Not raced against `stop`: a dispatched Produce has appended, its ack is owed.
            let pending = Pending {
                answer,
                ends_on_hangup,
            };
            if queue.send(pending).await.is_err() {
                return ReadEnd::Closed; // the writer stopped: the connection is being closed
            }
            if since_yield >= YIELD_EVERY_BYTES {
                // Validating and appending megabytes of buffered requests back to back would
                // keep the tasks they wake (the write-ahead flush a full buffer starts) waiting
                // on this thread.
                since_yield = 0;
                tokio::task::yield_now().await;
            }
        }
        // The clock of a frame starts with its first byte; bytes left after a whole frame
        // are the next one's start.
        if handed_out || frames.buffered() == 0 {
            frame_deadline = None;
        }
        if frames.buffered() > 0 && frame_deadline.is_none() {
            frame_deadline = Some(Instant::now() + frame_timeout);
        }
        if *stop.borrow() {
            // A frame cut off by the stop was never dispatched: its client sees the
            // connection close without an answer, which is true - nothing of it was stored.
            return ReadEnd::Stopped;
        }
        let own = buffered.bytes();
        // Until a SASL client has logged in, each read ends where the frame does (its size
        // prefix first): a frame over sasl_server_max_receive_size is refused on its prefix,
        // before the rest of it is read or charged. A login is a few small frames.
        let chunk = match auth.as_ref().and_then(Authenticator::frame_limit) {
            Some(_) => frames.missing().clamp(1, READ_CHUNK),
            None => READ_CHUNK,
        };
        let more = async {
            let allowed = tokio::select! {
                // Room first: bytes a client sent before closing are still read when they may.
                biased;
                allowed = connection.budgets.wait_readable(own, chunk) => allowed,
                // A client gone while its connection waits for room must not keep holding
                // the budgets (a partial request's bytes count) until its frame deadline.
                () = frames.get_ref().hung_up() => return Ok(0),
            };
            frames
                .fill(allowed, |side, missing| {
                    low_water.expect(side.socket(), missing, R::HELD)
                })
                .await
        };
        let read = tokio::select! {
            read = within(frame_deadline, more) => read,
            _ = connection.budgets.idle_for(idle), if frame_deadline.is_none() => {
                tracing::debug!(%peer, "closing connection idle for connections_max_idle_ms");
                return ReadEnd::Closed;
            }
            _ = stop.changed() => return ReadEnd::Stopped,
            _ = queue.closed() => return ReadEnd::Closed,
            () = connection.budgets.dropped() => {
                // (Logged by the budget too, at most once per interval, as a warning.)
                tracing::debug!(
                    %peer,
                    partial = buffered.bytes(),
                    "closing connection: its partial request held more than its share of \
                     queued_max_request_bytes while another connection waited for room"
                );
                return ReadEnd::Closed;
            }
        };
        match read {
            Some(Ok(0)) => return ReadEnd::Closed, // the client closed between requests
            Some(Ok(read)) => buffered.add(read),
            // A client that went away: a TLS client that closed without close_notify (as many
            // do), or one whose socket was reset. A close like any other.
            Some(Err(FrameError::Io(error)))
                if matches!(
                    error.kind(),
                    io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::BrokenPipe
                ) =>
            {
                tracing::debug!(%peer, %error, "closing connection");
                return ReadEnd::Closed;
            }
            Some(Err(error)) => {
                if CLOSING.admit() {
                    tracing::info!(%peer, %error, "closing connection");
                }
                return ReadEnd::Closed;
            }
            None => {
                if CLOSING.admit() {
                    tracing::info!(
                        %peer,
                        "closing connection: a request did not arrive whole within {} ms of its \
                         first byte (request_read_timeout_ms)",
                        frame_timeout.as_millis()
                    );
                }
                return ReadEnd::Closed;
            }
        }
    }
}

/// Queues a SASL step's answer in request order; the connection's end if that was its last
/// (a failed login) or the writer is gone.
async fn queue_sasl_answer(
    gate: Gate,
    charge: Charge,
    queue: &mpsc::Sender<Pending>,
) -> Option<ReadEnd> {
    let Gate::Answer { reply, delay } = gate else {
        return Some(ReadEnd::Closed);
    };
    let last = matches!(reply, Reply::Final(_));
    let answer = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        Answer {
            reply,
            charge,
            fetch_turn: None,
        }
    });
    let pending = Pending {
        answer,
        ends_on_hangup: false,
    };
    (queue.send(pending).await.is_err() || last).then_some(ReadEnd::Closed)
}

/// Completes once the client has closed its side (or the socket failed), even with bytes of
/// it still unread. Readiness says "readable" while unread bytes wait, so while they do this
/// looks again once a second rather than spinning; the closed flag, once seen, stays set.
async fn peer_closed<F>(ready: impl Fn() -> F)
where
    F: Future<Output = io::Result<Ready>>,
{
    loop {
        match ready().await {
            Ok(ready) if !ready.is_read_closed() => tokio::time::sleep(CLOSED_CHECK_INTERVAL).await,
            _ => return,
        }
    }
}

/// `future`'s output, or `None` if `deadline` passes first.
async fn within<T>(
    deadline: Option<Instant>,
    future: impl std::future::Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

/// Writes the answers in request order; after a hangup, skips (and cancels) waiting Fetches and
/// Metadata requests.
async fn write_answers(
    mut socket: impl AsyncWrite + Unpin,
    mut pending: mpsc::Receiver<Pending>,
    mut hung_up: watch::Receiver<bool>,
    peer: std::net::SocketAddr,
    idle: Duration,
) {
    while let Some(Pending {
        mut answer,
        ends_on_hangup,
    }) = pending.recv().await
    {
        let answered = if ends_on_hangup {
            tokio::select! {
                answered = &mut answer => answered,
                _ = hung_up.wait_for(|gone| *gone) => {
                    answer.abort();
                    continue;
                }
            }
        } else {
            answer.await
        };
        let closing = match answered {
            Ok(Answer {
                reply,
                charge,
                fetch_turn,
            }) => {
                let closing = match reply {
                    Reply::Response(frame) => write_response(&mut socket, frame.chunks(), idle)
                        .await
                        .err()
                        .map(|e| e.to_string()),
                    Reply::None => None,
                    Reply::Close(reason) => Some(reason.to_string()),
                    Reply::Final(bytes) => {
                        Some(match write_response(&mut socket, &[bytes], idle).await {
                            Ok(()) => "authentication failed".to_string(),
                            Err(error) => error.to_string(),
                        })
                    }
                };
                // Written: its bytes leave the budgets, a Fetch passes on its turn.
                drop((charge, fetch_turn));
                closing
            }
            Err(failed) => {
                tracing::error!(%peer, %failed, "request handler failed; closing connection");
                Some("request handler failed".to_string())
            }
        };
        if let Some(reason) = closing {
            tracing::debug!(%peer, reason, "closing connection");
            // Nobody will read these answers: stop their work and free their bytes. The last
            // first, so that none of them starts in the place of one before it that is being
            // stopped: what ran of the connection's requests is a prefix of them.
            pending.close();
            let mut rest = vec![];
            while let Ok(next) = pending.try_recv() {
                rest.push(next.answer);
            }
            for answer in rest.iter().rev() {
                answer.abort();
            }
            return;
        }
    }
}

/// Writes one response, its chunks gathered into each write (record data goes from the
/// cache to the socket without a copy of its own); fails if the client takes none of it for
/// `idle` (a client that stops reading must not pin its responses, and the budgets with
/// them, for ever).
async fn write_response(
    socket: &mut (impl AsyncWrite + Unpin),
    chunks: &[Bytes],
    idle: Duration,
) -> Result<(), WriteError> {
    let mut slices: Vec<IoSlice<'_>> = chunks
        .iter()
        .filter(|c| !c.is_empty())
        .map(|c| IoSlice::new(c))
        .collect();
    let mut rest = slices.as_mut_slice();
    while !rest.is_empty() {
        let gathered = rest.len().min(IOVECS_PER_WRITE);
        match tokio::time::timeout(idle, socket.write_vectored(&rest[..gathered])).await {
            Ok(Ok(0)) => return Err(WriteError::Closed),
            Ok(Ok(written)) => IoSlice::advance_slices(&mut rest, written),
            Ok(Err(error)) => return Err(WriteError::Io(error)),
            Err(_) => return Err(WriteError::Unread(idle)),
        }
    }
    // A TLS stream may keep the end of the response in its buffer when the socket was full
    // (the write above counts it as written): without a flush it would wait for the next
    // response, and a consumer's only Fetch for the next request timeout. (No-op over TCP.)
    match tokio::time::timeout(idle, socket.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(WriteError::Io(error)),
        Err(_) => Err(WriteError::Unread(idle)),
    }
}

/// Why a response could not be written (the connection is closed).
#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("the client closed the connection")]
    Closed,
    #[error("{0}")]
    Io(io::Error),
    #[error(
        "the client read nothing of its response for {} ms (connections_max_idle_ms)",
        .0.as_millis()
    )]
    Unread(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker of its own serving one PLAINTEXT listener, whose control requests the test
    /// answers (playing Python's side of the bridge), and its address.
    mod served {
        use std::net::SocketAddr;

        use bytes::{Buf, BufMut, BytesMut};
        use kafka_protocol::messages::{ListGroupsRequest, ProduceRequest, RequestHeader};
        use kafka_protocol::protocol::{Encodable, StrBytes};
        use tokio::net::TcpListener;

        use super::*;
        use crate::broker::tests::TestBroker;
        use crate::control::bridge::ControlCall;
        use crate::control::group_admin;
        use crate::protocol::header::encode_response;
        use crate::server::handlers::testing::broker_with;
        use crate::server::{serve, BoundListener};

        pub(super) struct Served {
            pub(super) t: TestBroker,
            pub(super) addr: SocketAddr,
            _stop: watch::Sender<bool>,
        }

        /// A broker holding topic "t" (1 partition), listening on a port of its own.
        pub(super) async fn broker() -> Served {
            let t = broker_with(&["t"], 1, 0).await;
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let entry = Entry {
                listener: "PLAINTEXT".into(),
                tls: None,
                sasl: None,
            };
            let (stop, stopped) = watch::channel(false);
            let bound = vec![BoundListener { listener, entry }];
            let budget = Arc::new(ByteBudget::new(t.broker.config.queued_max_request_bytes));
            tokio::spawn(serve(t.broker.clone(), bound, budget, stopped));
            Served {
                t,
                addr,
                _stop: stop,
            }
        }

        /// One request frame, as a client sends it (request header v1).
        pub(super) fn frame(
            api: ApiKey,
            version: i16,
            correlation_id: i32,
            body: &impl Encodable,
        ) -> Vec<u8> {
            let header = RequestHeader::default()
                .with_request_api_key(api as i16)
                .with_request_api_version(version)
                .with_correlation_id(correlation_id)
                .with_client_id(Some(StrBytes::from_static_str("order-test")));
            let mut payload = BytesMut::new();
            header.encode(&mut payload, 1).unwrap();
            body.encode(&mut payload, version).unwrap();
            let mut out = Vec::with_capacity(4 + payload.len());
            out.put_i32(payload.len() as i32);
            out.extend_from_slice(&payload);
            out
        }

        pub(super) fn list_groups(correlation_id: i32) -> Vec<u8> {
            frame(
                ApiKey::ListGroups,
                0,
                correlation_id,
                &ListGroupsRequest::default(),
            )
        }

        pub(super) fn produce(correlation_id: i32, body: &ProduceRequest) -> Vec<u8> {
            frame(ApiKey::Produce, 3, correlation_id, body)
        }

        /// Answers a ListGroups the way Python does: no groups.
        pub(super) fn answer(call: ControlCall) {
            let answer = group_admin::ListGroupsResponse {
                error_code: 0,
                throttle_time_ms: 0,
                groups: vec![],
            };
            let wire = group_admin::list_groups(answer, call.api_version);
            let frame = encode_response(call.correlation_id, call.api_version, &wire);
            let _ = call.reply.send(frame);
        }

        /// The correlation id of the next response the client reads.
        pub(super) async fn next_answer(client: &mut TcpStream) -> i32 {
            let size = client.read_i32().await.unwrap();
            let mut response = vec![0; size as usize];
            client.read_exact(&mut response).await.unwrap();
            (&response[..4]).get_i32()
        }
    }

    #[tokio::test]
    async fn a_connections_requests_reach_python_one_at_a_time_and_others_meanwhile() {
        let served = served::broker().await;
        let bridge = &served.t.broker.control;
        let mut a = TcpStream::connect(served.addr).await.unwrap();
        let pipelined = [served::list_groups(1), served::list_groups(2)].concat();
        a.write_all(&pipelined).await.unwrap();
        let first = bridge.next().await.unwrap();
        assert_eq!(first.correlation_id, 1);
        // A's second request waits for its first one's answer; B's is handed over meanwhile.
        let mut b = TcpStream::connect(served.addr).await.unwrap();
        b.write_all(&served::list_groups(10)).await.unwrap();
        let other = bridge.next().await.unwrap();
        assert_eq!(
            other.correlation_id, 10,
            "A's second request overtook its first one"
        );
        assert_ne!(other.connection_id, first.connection_id);
        served::answer(other);
        assert_eq!(served::next_answer(&mut b).await, 10);
        let a_connection = first.connection_id;
        served::answer(first);
        let second = bridge.next().await.unwrap();
        assert_eq!(
            (second.correlation_id, second.connection_id),
            (2, a_connection)
        );
        served::answer(second);
        assert_eq!(served::next_answer(&mut a).await, 1);
        assert_eq!(served::next_answer(&mut a).await, 2);
    }

    #[tokio::test]
    async fn a_produce_appends_only_after_the_request_before_it_is_answered() {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::records::Compression;

        let served = served::broker().await;
        let bridge = &served.t.broker.control;
        let records = crate::log::batch::tests::encoded_batch(3, 10, Compression::None);
        let body = kafka_protocol::messages::ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(crate::protocol::topic_name("t"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records))])]);
        let mut client = TcpStream::connect(served.addr).await.unwrap();
        let pipelined = [served::list_groups(1), served::produce(2, &body)].concat();
        client.write_all(&pipelined).await.unwrap();
        let list_groups = bridge.next().await.unwrap();
        // Both frames were read at once; the Produce has not appended.
        let partition = served.t.broker.topic("t").unwrap().partitions[0].current();
        assert!(!partition.has_pending() && partition.high_watermark() == 0);
        served::answer(list_groups);
        assert_eq!(served::next_answer(&mut client).await, 1);
        assert_eq!(served::next_answer(&mut client).await, 2);
        assert_eq!(partition.high_watermark(), 3);
    }

    /// A stream that, like a TLS stream, takes writes into a buffer and sends on a flush.
    #[derive(Default)]
    struct Buffering {
        pending: Vec<u8>,
        sent: Vec<u8>,
    }

    impl AsyncWrite for Buffering {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.pending.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            let pending = std::mem::take(&mut self.pending);
            self.sent.extend(pending);
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.poll_flush(cx)
        }
    }

    #[tokio::test]
    async fn a_response_is_sent_whole_not_left_in_the_streams_buffer() {
        let mut stream = Buffering::default();
        let chunks = [Bytes::from_static(b"response")];
        write_response(&mut stream, &chunks, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(stream.sent, b"response");
    }

    /// A socket that takes at most 3 bytes of a gathered write at a time.
    #[derive(Default)]
    struct Trickling(Vec<u8>);

    impl AsyncWrite for Trickling {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let taken = buf.len().min(3);
            self.0.extend_from_slice(&buf[..taken]);
            Poll::Ready(Ok(taken))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let mut taken = 0;
            for buf in bufs {
                let part = buf.len().min(3 - taken);
                self.0.extend_from_slice(&buf[..part]);
                taken += part;
            }
            Poll::Ready(Ok(taken))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_response_in_chunks_goes_out_in_order_across_partial_writes() {
        let mut stream = Trickling::default();
        let chunks: Vec<Bytes> = ["ab", "", "cdefg", "h", "ijklmnop"]
            .into_iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .chain((0..100).map(|i| Bytes::from(vec![b'0' + (i % 10) as u8; 2])))
            .collect();
        write_response(&mut stream, &chunks, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(stream.0, chunks.concat());
    }
}
