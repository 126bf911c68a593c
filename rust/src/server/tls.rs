//! TLS for the SSL listeners: the server certificate and key from PEM files, optional client
//! certificates (Kafka's `ssl.client.auth`: none, requested or required, checked against a CA
//! bundle), read again when the files change so that a renewed certificate needs no restart.
//! A client certificate's subject is the connection's principal, as Kafka names it (`x500`).

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, BufReader, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::auth::authorizer::ANONYMOUS;
use crate::config::TlsFiles;

/// Ciphertext read from the socket at once. rustls reads 4 KiB per call; reading 64 KiB into
/// a buffer beneath it cuts the receive calls of a large request 16-fold (8 % less broker CPU
/// per GiB produced over SASL_SSL, bench/broker_bench.py), for one more copy of the bytes.
const TLS_READ_BUFFER: usize = 64 * 1024;

/// Accepts TLS connections with the certificate the files hold now.
pub(crate) struct Tls {
    files: TlsFiles,
    current: RwLock<Loaded>,
}

/// Who a TLS endpoint serves.
#[derive(Clone, Copy)]
pub(crate) enum Side {
    /// Kafka clients: certificates as `ssl.client.auth` says.
    Kafka,
    /// The operations endpoint: never asks for a certificate (probes and scrapers present
    /// none; `/metrics` has its bearer token).
    Operations,
}

struct Loaded {
    kafka: tokio_rustls::TlsAcceptor,
    operations: tokio_rustls::TlsAcceptor,
    /// When each file was last modified as read (a change means read them again).
    stamps: Vec<Option<SystemTime>>,
}

/// A TLS setting an error names, so that the message can spell it as the user gave it (a flag
/// or an environment variable: `BrokerConfig::setting`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsSetting {
    CertFile,
    KeyFile,
    CaFile,
    ClientAuth,
}

impl TlsSetting {
    /// The setting's name in the broker's configuration.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TlsSetting::CertFile => "ssl_certfile",
            TlsSetting::KeyFile => "ssl_keyfile",
            TlsSetting::CaFile => "ssl_cafile",
            TlsSetting::ClientAuth => "ssl_client_auth",
        }
    }

    /// The setting as a command-line flag (`--ssl-certfile`).
    fn flag(self) -> String {
        crate::config::flag(self.name())
    }
}

/// Why the certificate files do not make a TLS configuration; each names the file by its
/// setting.
#[derive(Debug)]
pub(crate) enum TlsError {
    Unreadable {
        setting: TlsSetting,
        path: PathBuf,
        source: pem::Error,
    },
    NoCertificate {
        setting: TlsSetting,
        path: PathBuf,
    },
    NoKey {
        path: PathBuf,
        source: pem::Error,
    },
    Authorities {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    NoAuthorities {
        mode: String,
    },
    Mismatch {
        certfile: PathBuf,
        keyfile: PathBuf,
        source: rustls::Error,
    },
    Protocols(rustls::Error),
}

/// A PEM reading error in a person's words: a missing file says so without the OS's number.
fn unreadable(error: &pem::Error) -> String {
    match error {
        pem::Error::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            "No such file or directory".to_string()
        }
        other => other.to_string(),
    }
}

impl TlsError {
    /// What went wrong and what to do, naming each setting as `spell` gives it.
    pub(crate) fn describe(&self, spell: impl Fn(TlsSetting) -> String) -> String {
        use TlsSetting::*;
        match self {
            TlsError::Unreadable {
                setting,
                path,
                source,
            } => format!(
                "{} {}: {}",
                spell(*setting),
                path.display(),
                unreadable(source)
            ),
            TlsError::NoCertificate { setting, path } => format!(
                "{} {}: no certificate in it; give a PEM file",
                spell(*setting),
                path.display()
            ),
            TlsError::NoKey { path, source } => format!(
                "{} {}: no private key read ({}); give a PEM file with a PKCS#8, PKCS#1 or \
                 SEC1 key",
                spell(KeyFile),
                path.display(),
                unreadable(source)
            ),
            TlsError::Authorities { path, source } => {
                format!("{} {}: {source}", spell(CaFile), path.display())
            }
            TlsError::NoAuthorities { mode } => format!(
                "{} {mode} needs {}: the CAs client certificates must be signed by",
                spell(ClientAuth),
                spell(CaFile)
            ),
            TlsError::Mismatch {
                certfile,
                keyfile,
                source,
            } => format!(
                "{} {} and {} {}: {source}",
                spell(CertFile),
                certfile.display(),
                spell(KeyFile),
                keyfile.display()
            ),
            TlsError::Protocols(source) => source.to_string(),
        }
    }
}

/// Names the settings by their flags.
impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe(TlsSetting::flag))
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Unreadable { source, .. } | TlsError::NoKey { source, .. } => Some(source),
            TlsError::Authorities { source, .. } => Some(source.as_ref()),
            TlsError::Mismatch { source, .. } | TlsError::Protocols(source) => Some(source),
            TlsError::NoCertificate { .. } | TlsError::NoAuthorities { .. } => None,
        }
    }
}

impl Tls {
    /// Reads the files; an error says which file is wrong and how.
    pub(crate) fn load(files: TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let loaded = load(&files)?;
        Ok(Arc::new(Tls {
            files,
            current: RwLock::new(loaded),
        }))
    }

    /// Checks the files every reload interval and takes a changed set in for new
    /// connections; a set that does not load is logged and the one in use kept.
    pub(crate) fn spawn_reloads(self: &Arc<Tls>) -> tokio::task::JoinHandle<()> {
        let tls = Arc::downgrade(self);
        let interval = Duration::from_millis(self.files.reload_interval_ms.max(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(tls) = tls.upgrade() else { return };
                tls.reload_if_changed();
            }
        })
    }

    fn reload_if_changed(&self) {
        let stamps = stamps(&self.files);
        if self.read().stamps == stamps {
            return;
        }
        match load(&self.files) {
            Ok(loaded) => {
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = loaded;
                tracing::info!(certfile = %self.files.certfile.display(),
                    "TLS certificate files changed; new connections use them");
            }
            Err(error) => {
                tracing::warn!(%error, "TLS certificate files changed but do not load; \
                    new connections keep the previous certificate");
                // Not read again until they change again.
                self.current
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .stamps = stamps;
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.current.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The TLS handshake, within `timeout`; the connection's principal with it.
    pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        socket: S,
        timeout: Duration,
        side: Side,
    ) -> io::Result<(TlsStream<BufReader<S>>, Arc<str>)> {
        let acceptor = match side {
            Side::Kafka => self.read().kafka.clone(),
            Side::Operations => self.read().operations.clone(),
        };
        let stream = tokio::time::timeout(
            timeout,
            acceptor.accept(BufReader::with_capacity(TLS_READ_BUFFER, socket)),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
        let principal = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map_or_else(
                || ANONYMOUS.into(),
                |cert| super::x500::principal(cert).into(),
            );
        Ok((stream, principal))
    }
}

/// A TCP socket that a TLS stream reads and writes while its connection also watches it for
/// the client's close (and sets its receive low-water mark): one descriptor for both. (A
/// `dup` of it for the watching cost every TLS connection a second descriptor, which the
/// connection cap, counting connections, did not see: 2,390 half-open TLS connections
/// exhausted 4,096 descriptors.)
pub(crate) struct SharedSocket(pub(crate) Arc<TcpStream>);

impl AsyncRead for SharedSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // (Free: the buffer beneath a TLS stream is initialised once, when made.)
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(read) => {
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale; try_read cleared it, so the next poll waits.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl AsyncWrite for SharedSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        use std::os::fd::AsRawFd;
        // SAFETY: shutdown(2) on the descriptor the Arc keeps open; it touches no memory.
        let done = unsafe { libc::shutdown(self.0.as_raw_fd(), libc::SHUT_WR) };
        match done {
            0 => Poll::Ready(Ok(())),
            _ => match io::Error::last_os_error() {
                // The client is gone already: nothing left to shut.
                error if error.raw_os_error() == Some(libc::ENOTCONN) => Poll::Ready(Ok(())),
                error => Poll::Ready(Err(error)),
            },
        }
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    let paths = [
        Some(&files.certfile),
        Some(&files.keyfile),
        files.cafile.as_ref(),
    ];
    paths
        .into_iter()
        .flatten()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

fn load(files: &TlsFiles) -> Result<Loaded, TlsError> {
    // Taken before reading: a change while reading is seen by the next check.
    let stamps = stamps(files);
    let acceptor = |side| server_config(files, side).map(|c| Arc::new(c).into());
    Ok(Loaded {
        kafka: acceptor(Side::Kafka)?,
        operations: acceptor(Side::Operations)?,
        stamps,
    })
}

fn server_config(files: &TlsFiles, side: Side) -> Result<ServerConfig, TlsError> {
    let certs = read_certs(&files.certfile, TlsSetting::CertFile)?;
    let key = PrivateKeyDer::from_pem_file(&files.keyfile).map_err(|source| TlsError::NoKey {
        path: files.keyfile.clone(),
        source,
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client_auth = match side {
        Side::Kafka => files.client_auth.as_str(),
        Side::Operations => "none",
    };
    let verifier = match (client_auth, &files.cafile) {
        ("none", _) => WebPkiClientVerifier::no_client_auth(),
        (mode, Some(cafile)) => {
            let refused = |e: Box<dyn std::error::Error + Send + Sync>| TlsError::Authorities {
                path: cafile.clone(),
                source: e,
            };
            let mut roots = RootCertStore::empty();
            for cert in read_certs(cafile, TlsSetting::CaFile)? {
                roots.add(cert).map_err(|e| refused(e.into()))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if mode == "requested" {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder.build().map_err(|e| refused(e.into()))?
        }
        (mode, None) => {
            return Err(TlsError::NoAuthorities {
                mode: mode.to_string(),
            })
        }
    };
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Protocols)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::Mismatch {
            certfile: files.certfile.clone(),
            keyfile: files.keyfile.clone(),
            source,
        })
}

fn read_certs(path: &Path, setting: TlsSetting) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Unreadable {
            setting,
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            setting,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_does_not_load_is_named_with_its_setting() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            certfile: dir.path().join("server.pem"),
            keyfile: dir.path().join("server.key"),
            cafile: None,
            client_auth: "none".into(),
            reload_interval_ms: 1000,
        };
        let missing = Tls::load(files.clone()).err().unwrap().to_string();
        assert!(missing.starts_with("--ssl-certfile"), "{missing}");
        assert!(missing.contains("server.pem"), "{missing}");
        std::fs::write(&files.certfile, "no PEM blocks here").unwrap();
        let empty = Tls::load(files.clone()).err().unwrap().to_string();
        assert!(empty.contains("no certificate in it"), "{empty}");
        std::fs::write(&files.certfile, CERT).unwrap();
        let env = |s: TlsSetting| format!("KAFSCALE_{}", s.name().to_ascii_uppercase());
        let no_key = Tls::load(files).err().unwrap().describe(env);
        assert_eq!(
            no_key,
            format!(
                "KAFSCALE_SSL_KEYFILE {}: no private key read (No such file or directory); give \
                 a PEM file with a PKCS#8, PKCS#1 or SEC1 key",
                dir.path().join("server.key").display()
            )
        );
    }

    /// A PEM certificate block: reading the file does not parse what it holds.
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
}
