//! SASL on SASL_PLAINTEXT and SASL_SSL listeners: SaslHandshake v0–1 and SaslAuthenticate v0–2
//! with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, as Kafka serves them. After a v0 handshake the
//! client sends its SASL tokens bare (a length and the token, no request header) and gets the
//! server's the same way (older librdkafka and aiokafka start so). Until a client has
//! authenticated only ApiVersions and the SASL requests are answered; any other request closes
//! the connection. A failed login is answered with Kafka's error after a delay (to slow down
//! guessing) and the connection closed. With `connections_max_reauth_ms`, a session lasts that
//! long (KIP-368): the client re-authenticates on the same connection before it ends, or its
//! next request after the end closes the connection.

pub(crate) mod credentials;
pub(crate) mod hashing;
pub(crate) mod scram;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use ring::rand::SecureRandom;
use tokio::time::Instant;

use super::handlers::Reply;
use super::log_limit::LogLimit;
use crate::config::BrokerConfig;
use crate::meta::catalog::Catalog;
use crate::protocol::header::{encode_response, Request};
use scram::{ClientFirst, ScramMechanism, ServerFirst};

/// The SASL settings of a broker's SASL listeners.
pub(crate) struct SaslSettings {
    /// Kafka's `sasl.enabled.mechanisms`, in the order SaslHandshake lists them.
    pub(crate) mechanisms: Vec<String>,
    pub(crate) users_file: Option<PathBuf>,
    /// Kafka's `connections.max.reauth.ms` (None: sessions last as long as the connection).
    pub(crate) session_lifetime: Option<Duration>,
    /// Kafka's `connection.failed.authentication.delay.ms`.
    pub(crate) failure_delay: Duration,
    /// Kafka's `sasl.server.max.receive.size`: the largest frame a client may send before it
    /// has authenticated (its size prefix is checked before any of it is read).
    pub(crate) max_receive_size: usize,
    pub(crate) catalog: Arc<Catalog>,
    /// Where logins hash passwords: off the async workers, a few at once.
    pub(crate) hashing: hashing::PasswordHashing,
}

impl SaslSettings {
    /// The settings of `config`'s SASL listeners; credentials live in `catalog`.
    pub(crate) fn new(config: &BrokerConfig, catalog: Arc<Catalog>) -> SaslSettings {
        SaslSettings {
            mechanisms: config
                .sasl_enabled_mechanisms
                .split(',')
                .map(|m| m.trim().to_string())
                .filter(|m| !m.is_empty())
                .collect(),
            users_file: config.sasl_users_file.clone(),
            session_lifetime: (config.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(config.connections_max_reauth_ms)),
            failure_delay: Duration::from_millis(config.connection_failed_authentication_delay_ms),
            max_receive_size: config.sasl_server_max_receive_size,
            catalog,
            hashing: hashing::PasswordHashing::for_this_machine(),
        }
    }
}

pub(crate) fn random_bytes(n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source works");
    bytes
}

/// What a connection does with a request, as far as authentication goes.
pub(crate) enum Gate {
    /// Dispatch it as usual.
    Pass,
    /// This is its answer (a SASL request), sent after `delay`.
    Answer { reply: Reply, delay: Duration },
    /// Close the connection without an answer, for this reason.
    Close(String),
}

enum Mechanism {
    Plain,
    Scram(ScramMechanism),
}

/// Where a connection's login stands.
enum Step {
    /// No exchange going on: a SaslHandshake may start one.
    Idle,
    /// The handshake chose a mechanism; its first SaslAuthenticate comes next.
    Chosen(Mechanism),
    /// SCRAM sent its first message; the client's final one comes next.
    ScramSent {
        user: String,
        server: Box<ServerFirst>,
    },
}

struct Session {
    principal: String,
    ends: Option<Instant>,
}

/// One connection's authentication.
pub(crate) struct Authenticator {
    settings: Arc<SaslSettings>,
    step: Step,
    session: Option<Session>,
    /// A v0 handshake chose the mechanism: the exchange's frames are bare tokens.
    bare_tokens: bool,
}

/// The outcome of one SASL request: the answer's error (if any), what it carries back, and
/// whether the exchange failed (answered late, then the connection closes).
struct Outcome {
    error: Option<(ResponseError, String)>,
    auth_bytes: Bytes,
    failed: bool,
}

impl Outcome {
    fn ok(auth_bytes: impl Into<Bytes>) -> Outcome {
        Outcome {
            error: None,
            auth_bytes: auth_bytes.into(),
            failed: false,
        }
    }

    fn failed(error: ResponseError, message: impl Into<String>) -> Outcome {
        Outcome {
            error: Some((error, message.into())),
            auth_bytes: Bytes::new(),
            failed: true,
        }
    }
}

impl Authenticator {
    pub(crate) fn new(settings: Arc<SaslSettings>) -> Authenticator {
        Authenticator {
            settings,
            step: Step::Idle,
            session: None,
            bare_tokens: false,
        }
    }

    /// The largest frame this connection may send now: `sasl.server.max.receive.size` until
    /// a login succeeded, `None` (the listener's limit) after it.
    pub(crate) fn frame_limit(&self) -> Option<usize> {
        self.session
            .is_none()
            .then_some(self.settings.max_receive_size)
    }

    /// The logged-in principal (`User:name`), once a login succeeded.
    pub(crate) fn principal(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.principal.as_str())
    }

    /// Whether the next frame is a bare SASL token rather than a request.
    pub(crate) fn expects_bare_token(&self) -> bool {
        self.bare_tokens && !matches!(self.step, Step::Idle)
    }

    /// A bare token (after a v0 handshake): the server's token back the same way, or, when
    /// the login fails, nothing (v0 has no way to say why) and the connection closes.
    pub(crate) async fn bare_token(&mut self, token: &[u8]) -> Gate {
        let outcome = self.exchange(token).await;
        if outcome.failed {
            return Gate::Answer {
                reply: Reply::Final(Bytes::new()),
                delay: self.settings.failure_delay,
            };
        }
        if matches!(self.step, Step::Idle) {
            self.bare_tokens = false;
        }
        let mut framed = bytes::BytesMut::with_capacity(4 + outcome.auth_bytes.len());
        framed.extend_from_slice(&(outcome.auth_bytes.len() as u32).to_be_bytes());
        framed.extend_from_slice(&outcome.auth_bytes);
        Gate::Answer {
            reply: Reply::Response(framed.freeze().into()),
            delay: Duration::ZERO,
        }
    }

    /// Decides what happens to `request` on this connection.
    pub(crate) async fn gate(&mut self, request: &Request) -> Gate {
        match request.api_key {
            ApiKey::ApiVersions => Gate::Pass,
            ApiKey::SaslHandshake => self.handshake(request),
            ApiKey::SaslAuthenticate => self.authenticate(request).await,
            api => match &self.session {
                Some(session) if session.ends.is_none_or(|end| Instant::now() < end) => Gate::Pass,
                Some(session) => Gate::Close(format!(
                    "the session of {} ended (connections_max_reauth_ms) and the client did \
                     not re-authenticate",
                    session.principal
                )),
                None => Gate::Close(format!("{api:?} request before SASL authentication")),
            },
        }
    }

    fn handshake(&mut self, request: &Request) -> Gate {
        let body: SaslHandshakeRequest = match request.body() {
            Ok(body) => body,
            Err(reason) => return Gate::Close(reason.to_string()),
        };
        let enabled = &self.settings.mechanisms;
        let wanted = body.mechanism.as_str();
        let (error, failed) = if !matches!(self.step, Step::Idle) {
            (Some(ResponseError::IllegalSaslState), true)
        } else if !enabled.iter().any(|m| m == wanted) {
            (Some(ResponseError::UnsupportedSaslMechanism), true)
        } else {
            self.step = Step::Chosen(match ScramMechanism::from_name(wanted) {
                Some(scram) => Mechanism::Scram(scram),
                None => Mechanism::Plain,
            });
            self.bare_tokens = request.api_version == 0;
            (None, false)
        };
        if failed {
            tracing::info!(mechanism = wanted, "SASL handshake refused");
        }
        let response = SaslHandshakeResponse::default()
            .with_error_code(error.map_or(0, |e| e.code()))
            .with_mechanisms(
                enabled
                    .iter()
                    .map(|m| StrBytes::from_string(m.clone()))
                    .collect(),
            );
        self.answer(request, &response, failed)
    }

    async fn authenticate(&mut self, request: &Request) -> Gate {
        let body: SaslAuthenticateRequest = match request.body() {
            Ok(body) => body,
            Err(reason) => return Gate::Close(reason.to_string()),
        };
        let outcome = self.exchange(&body.auth_bytes).await;
        let lifetime = match (&outcome.error, &self.step, self.settings.session_lifetime) {
            (None, Step::Idle, Some(lifetime)) => lifetime.as_millis() as i64,
            _ => 0,
        };
        let (code, message) = match &outcome.error {
            Some((error, message)) => (error.code(), Some(StrBytes::from_string(message.clone()))),
            None => (0, None),
        };
        let response = SaslAuthenticateResponse::default()
            .with_error_code(code)
            .with_error_message(message)
            .with_auth_bytes(outcome.auth_bytes)
            .with_session_lifetime_ms(lifetime);
        self.answer(request, &response, outcome.failed)
    }

    /// One step of the exchange the handshake chose, with the client's token.
    async fn exchange(&mut self, token: &[u8]) -> Outcome {
        match std::mem::replace(&mut self.step, Step::Idle) {
            Step::Idle => Outcome::failed(
                ResponseError::IllegalSaslState,
                "SaslAuthenticate without a SaslHandshake first",
            ),
            Step::Chosen(Mechanism::Plain) => self.plain(token).await,
            Step::Chosen(Mechanism::Scram(mechanism)) => self.scram_first(mechanism, token).await,
            Step::ScramSent { user, server } => self.scram_final(&user, &server, token),
        }
    }

    async fn plain(&mut self, message: &[u8]) -> Outcome {
        // authzid NUL authcid NUL passwd
        let parts: Vec<&[u8]> = message.split(|b| *b == 0).collect();
        let [authzid, user, password] = parts[..] else {
            return Outcome::failed(
                ResponseError::SaslAuthenticationFailed,
                "invalid SASL/PLAIN message",
            );
        };
        let (Ok(authzid), Ok(user), Ok(password)) = (
            std::str::from_utf8(authzid),
            std::str::from_utf8(user),
            std::str::from_utf8(password),
        ) else {
            return Outcome::failed(ResponseError::SaslAuthenticationFailed, "not UTF-8");
        };
        if !authzid.is_empty() && authzid != user {
            return Outcome::failed(
                ResponseError::SaslAuthenticationFailed,
                "Authentication failed: an authorization id other than the user name",
            );
        }
        let s = &self.settings;
        let users_file = s.users_file.as_deref();
        match credentials::password_matches(&s.catalog, users_file, &s.hashing, user, password)
            .await
        {
            Ok(true) => self.start_session(user, Bytes::new()),
            Ok(false) => invalid_credentials(user, "PLAIN"),
            Err(error) => unavailable(user, &error),
        }
    }

    async fn scram_first(&mut self, mechanism: ScramMechanism, message: &[u8]) -> Outcome {
        let first = match ClientFirst::parse(message) {
            Ok(first) => first,
            Err(error) => {
                static REFUSED: LogLimit = LogLimit::new("refused SCRAM first messages");
                if REFUSED.admit() {
                    tracing::info!(reason = error.0, "SCRAM first message refused");
                }
                return Outcome::failed(
                    ResponseError::SaslAuthenticationFailed,
                    format!("Authentication failed: {}", error.0),
                );
            }
        };
        let s = &self.settings;
        let credential = match credentials::scram_credential(
            &s.catalog,
            s.users_file.as_deref(),
            &s.hashing,
            mechanism,
            &first.user,
        )
        .await
        {
            Ok(Some(credential)) => credential,
            Ok(None) => return invalid_credentials(&first.user, mechanism.name()),
            Err(error) => return unavailable(&first.user, &error),
        };
        // Letters and digits only, as Kafka's: older librdkafka (2.0) mangles a nonce with '+'.
        let nonce: String = random_bytes(20)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let server = ServerFirst::new(mechanism, &first, credential, &nonce);
        let reply = Bytes::from(server.message.clone());
        self.step = Step::ScramSent {
            user: first.user,
            server: Box::new(server),
        };
        Outcome::ok(reply)
    }

    fn scram_final(&mut self, user: &str, server: &ServerFirst, message: &[u8]) -> Outcome {
        match server.finish(message) {
            Ok(server_final) => self.start_session(user, Bytes::from(server_final)),
            Err(error) => {
                tracing::debug!(user, reason = error.0, "SCRAM final message refused");
                invalid_credentials(user, "SCRAM")
            }
        }
    }

    fn start_session(&mut self, user: &str, auth_bytes: Bytes) -> Outcome {
        let principal = format!("User:{user}");
        // KIP-368: re-authentication renews a session, it does not change who it is.
        if let Some(session) = self.session.as_ref().filter(|s| s.principal != principal) {
            static REFUSED: LogLimit = LogLimit::new("refused re-authentications");
            if REFUSED.admit() {
                tracing::info!(
                    from = session.principal,
                    to = principal,
                    "SASL re-authentication as another principal refused"
                );
            }
            return Outcome::failed(
                ResponseError::SaslAuthenticationFailed,
                format!(
                    "re-authentication must keep the principal {}, not {principal}",
                    session.principal
                ),
            );
        }
        tracing::debug!(%principal, "SASL authentication succeeded");
        let ends = self.settings.session_lifetime.map(|l| Instant::now() + l);
        self.session = Some(Session { principal, ends });
        Outcome::ok(auth_bytes)
    }

    fn answer<T>(&self, request: &Request, response: &T, failed: bool) -> Gate
    where
        T: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::HeaderVersion,
    {
        let reply = match encode_response(request.correlation_id, request.api_version, response) {
            Ok(bytes) if failed => Reply::Final(bytes),
            Ok(bytes) => Reply::Response(bytes.into()),
            Err(reason) => Reply::Close(reason),
        };
        let delay = if failed {
            self.settings.failure_delay
        } else {
            Duration::ZERO
        };
        Gate::Answer { reply, delay }
    }
}

fn invalid_credentials(user: &str, mechanism: &str) -> Outcome {
    static FAILED: LogLimit = LogLimit::new("failed SASL logins");
    if FAILED.admit() {
        tracing::info!(
            user,
            mechanism,
            "SASL authentication failed: invalid credentials"
        );
    }
    Outcome::failed(
        ResponseError::SaslAuthenticationFailed,
        format!(
            "Authentication failed during authentication due to invalid credentials with SASL \
             mechanism {mechanism}"
        ),
    )
}

fn unavailable(user: &str, error: &credentials::LookupError) -> Outcome {
    // Every login attempt during an outage would log it.
    static UNAVAILABLE: LogLimit = LogLimit::new("SASL logins without credentials to check");
    if UNAVAILABLE.admit() {
        tracing::warn!(user, %error, "cannot check SASL credentials");
    }
    Outcome::failed(
        ResponseError::SaslAuthenticationFailed,
        "Authentication failed: the broker cannot read credentials right now; retry shortly",
    )
}

/// SaslHandshake and SaslAuthenticate on a listener without SASL: ILLEGAL_SASL_STATE, as
/// Kafka answers them.
pub(crate) fn outside_sasl(request: &Request) -> Reply {
    let error = ResponseError::IllegalSaslState.code();
    let (id, v) = (request.correlation_id, request.api_version);
    let encoded = match request.api_key {
        ApiKey::SaslHandshake => encode_response(
            id,
            v,
            &SaslHandshakeResponse::default().with_error_code(error),
        ),
        _ => {
            let message = "this listener does not use SASL";
            let response = SaslAuthenticateResponse::default()
                .with_error_code(error)
                .with_error_message(Some(StrBytes::from_static_str(message)));
            encode_response(id, v, &response)
        }
    };
    encoded.into()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{
        MetadataRequest, SaslAuthenticateRequest, SaslHandshakeRequest,
    };

    use super::*;
    use crate::meta::embedded::EmbeddedStore;
    use crate::protocol::header::testing::{read_response, request};

    struct Fixture {
        _dir: tempfile::TempDir,
        settings: Arc<SaslSettings>,
    }

    fn fixture(session_lifetime: Option<Duration>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users");
        std::fs::write(&users, "alice:alice-pw\nbob:bob-pw\n").unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        let settings = Arc::new(SaslSettings {
            mechanisms: vec!["PLAIN".into(), "SCRAM-SHA-512".into()],
            users_file: Some(users),
            session_lifetime,
            failure_delay: Duration::from_millis(100),
            max_receive_size: 512 << 10,
            catalog: Arc::new(Catalog::new(Arc::new(store), "t")),
            hashing: hashing::PasswordHashing::new(1),
        });
        Fixture {
            _dir: dir,
            settings,
        }
    }

    /// SaslHandshake v1 for PLAIN, then SaslAuthenticate v2 as `user`; the second answer.
    async fn plain_login(auth: &mut Authenticator, user: &str, password: &str) -> Gate {
        let handshake =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
        let Gate::Answer {
            reply: Reply::Response(_),
            ..
        } = auth
            .gate(&request(ApiKey::SaslHandshake, 1, &handshake))
            .await
        else {
            panic!("the handshake is answered");
        };
        let token = format!("\0{user}\0{password}");
        let body = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
        auth.gate(&request(ApiKey::SaslAuthenticate, 2, &body))
            .await
    }

    fn metadata() -> Request {
        request(ApiKey::Metadata, 12, &MetadataRequest::default())
    }

    fn lifetime_of(gate: Gate) -> i64 {
        let Gate::Answer {
            reply: Reply::Response(bytes),
            delay,
        } = gate
        else {
            panic!("a successful login is answered at once");
        };
        assert_eq!(delay, Duration::ZERO);
        let (_, response): (_, SaslAuthenticateResponse) = read_response(bytes, 2);
        assert_eq!(response.error_code, 0);
        response.session_lifetime_ms
    }

    #[tokio::test]
    async fn only_a_logged_in_client_is_served() {
        let f = fixture(None);
        let mut auth = Authenticator::new(f.settings.clone());
        assert!(matches!(auth.gate(&metadata()).await, Gate::Close(_)));
        let versions = request(
            ApiKey::ApiVersions,
            3,
            &kafka_protocol::messages::ApiVersionsRequest::default(),
        );
        assert!(matches!(auth.gate(&versions).await, Gate::Pass));
        let failed = plain_login(&mut auth, "alice", "wrong").await;
        let Gate::Answer {
            reply: Reply::Final(bytes),
            delay,
        } = failed
        else {
            panic!("a failed login is the connection's last answer");
        };
        assert_eq!(delay, Duration::from_millis(100));
        let (_, response): (_, SaslAuthenticateResponse) = read_response(bytes, 2);
        assert_eq!(
            response.error_code,
            ResponseError::SaslAuthenticationFailed.code()
        );
        let mut auth = Authenticator::new(f.settings.clone());
        assert_eq!(
            lifetime_of(plain_login(&mut auth, "alice", "alice-pw").await),
            0
        );
        assert!(matches!(auth.gate(&metadata()).await, Gate::Pass));
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_ends_unless_renewed_by_the_same_principal() {
        let f = fixture(Some(Duration::from_secs(2)));
        let mut auth = Authenticator::new(f.settings.clone());
        assert_eq!(
            lifetime_of(plain_login(&mut auth, "alice", "alice-pw").await),
            2000
        );
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(matches!(auth.gate(&metadata()).await, Gate::Pass));
        // renewed by the same user: two more seconds
        assert_eq!(
            lifetime_of(plain_login(&mut auth, "alice", "alice-pw").await),
            2000
        );
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert!(matches!(auth.gate(&metadata()).await, Gate::Pass));
        // another user cannot take the connection over
        let other = plain_login(&mut auth, "bob", "bob-pw").await;
        assert!(matches!(
            other,
            Gate::Answer {
                reply: Reply::Final(_),
                ..
            }
        ));
        let mut auth2 = Authenticator::new(f.settings.clone());
        assert_eq!(
            lifetime_of(plain_login(&mut auth2, "bob", "bob-pw").await),
            2000
        );
        tokio::time::advance(Duration::from_millis(2001)).await;
        assert!(
            matches!(auth2.gate(&metadata()).await, Gate::Close(_)),
            "the session ended"
        );
    }
}
