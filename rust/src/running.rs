//! A broker started and serving: its listeners bound, the core open, the accept loop running;
//! and its orderly stop. The Python handle (`python::broker`) only holds one of these.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::broker::startup::{plain, OpenFailure};
use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::server::budget::ByteBudget;
use crate::server::connection::Entry;
use crate::server::sasl::SaslSettings;
use crate::server::tls::Tls;
use crate::server::{self, BoundListener};

/// Why a broker did not start: one line in the user's terms, naming the setting at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// Its storage, metadata store or data directory (`broker::startup`).
    #[error(transparent)]
    Open(#[from] OpenFailure),
    /// A listener's address cannot be bound.
    #[error("{0}")]
    Listen(String),
    /// The TLS files cannot be read or do not make a configuration.
    #[error("{0}")]
    Tls(String),
}

pub(crate) struct Running {
    pub core: Arc<Broker>,
    /// Where each listener of `core.config.listener_specs` is bound, in their order.
    pub listen_addrs: Vec<SocketAddr>,
    stop: watch::Sender<bool>,
    /// The accept loop; after the stop it ends once every connection sent what it owes.
    server: Mutex<Option<JoinHandle<()>>>,
}

/// Binds `addr`, which the setting `name` (`broker_addr`, `listeners`, `metrics_addr`) gave.
async fn listen(
    config: &BrokerConfig,
    name: &str,
    addr: &str,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let failed = |e: std::io::Error| StartError::Listen(cannot_listen(config, name, addr, &e));
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// Binds every Kafka listener; one whose advertised port is 0 advertises the port it bound.
/// The TLS files are read here too, so that a wrong one fails the start.
async fn bind_listeners(
    config: &mut BrokerConfig,
    tls: Option<&Arc<Tls>>,
) -> Result<Vec<BoundListener>, StartError> {
    let mut bound = Vec::new();
    // The listeners are --broker-addr's one unless --listeners was given.
    let given = if config.setting_names.contains_key("listeners") {
        "listeners"
    } else {
        "broker_addr"
    };
    let specs = config.listener_specs.clone();
    for (i, spec) in specs.iter().enumerate() {
        let setting = format!("listener {}", spec.name);
        let (listener, addr) = listen(config, given, &spec.bind).await?;
        let spec = &mut config.listener_specs[i];
        if spec.advertised_port == 0 {
            spec.advertised_port = i32::from(addr.port());
        }
        let tls = match (spec.is_tls(), tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(tls.clone()),
            (true, None) => {
                return Err(StartError::Tls(format!(
                    "{setting} needs a certificate: set --ssl-certfile and --ssl-keyfile"
                )))
            }
        };
        // A SASL listener's settings need the core's catalog: set once it is open.
        let entry = Entry {
            listener: spec.name.as_str().into(),
            tls,
            sasl: None,
        };
        bound.push(BoundListener { listener, entry });
    }
    Ok(bound)
}

impl Running {
    /// Binds the Kafka listeners (and the operations endpoint's, if configured) before opening
    /// the core, so a taken port fails fast; an ephemeral port (0) is advertised as bound.
    pub(crate) async fn start(mut config: BrokerConfig) -> Result<Running, StartError> {
        let tls = match &config.tls {
            Some(files)
                if config.metrics_tls || config.listener_specs.iter().any(|l| l.is_tls()) =>
            {
                check_tls_files(&config)?;
                let tls = Tls::load(files.clone())
                    .map_err(|e| StartError::Tls(e.describe(|s| config.setting(s.name()))))?;
                tls.spawn_reloads();
                Some(tls)
            }
            _ => None,
        };
        let listeners = bind_listeners(&mut config, tls.as_ref()).await?;
        let listen_addrs = listeners
            .iter()
            .map(|l| l.listener.local_addr())
            .collect::<Result<_, _>>()
            .map_err(|e| StartError::Listen(e.to_string()))?;
        let ops_listener = match &config.metrics_addr {
            Some(addr) => Some(listen(&config, "metrics_addr", addr).await?.0),
            None => None,
        };
        let ops_tls = if config.metrics_tls {
            tls.clone()
        } else {
            None
        };
        let token_file = config.metrics_token_file.clone();
        let core = Broker::open(config).await?;
        let mut listeners = listeners;
        let sasl = Arc::new(SaslSettings::new(&core.config, core.log.catalog.clone()));
        for (bound, spec) in listeners.iter_mut().zip(&core.config.listener_specs) {
            if spec.is_sasl() {
                bound.entry.sasl = Some(sasl.clone());
            }
        }
        let (stop, stopped) = watch::channel(false);
        let budget = Arc::new(ByteBudget::new(core.config.queued_max_request_bytes));
        let server = tokio::spawn(server::serve(
            core.clone(),
            listeners,
            budget.clone(),
            stopped,
        ));
        if let Some(ops_listener) = ops_listener {
            tokio::spawn(server::ops_endpoint::serve(
                ops_listener,
                core.clone(),
                budget,
                ops_tls,
                token_file,
            ));
        }
        Ok(Running {
            core,
            listen_addrs,
            stop,
            server: Mutex::new(Some(server)),
        })
    }

    /// Stops accepting, flushes and hands off what this broker holds, waits for every
    /// connection to get what it is owed, then leaves the cluster.
    pub(crate) async fn stop(&self) {
        let _ = self.stop.send(true);
        self.core.shutdown().await;
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = server {
            let _ = server.await;
        }
        self.core.leave().await;
    }
}

/// A listener's address could not be bound. `name` is the setting the address came from
/// (`broker_addr`, `listeners`, `metrics_addr`).
fn cannot_listen(config: &BrokerConfig, name: &str, addr: &str, e: &std::io::Error) -> String {
    let setting = config.setting(name);
    let other = if name == "listeners" {
        format!("change its port in {setting}")
    } else {
        config.how_to_set(name, "HOST:PORT")
    };
    match e.kind() {
        ErrorKind::AddrInUse => {
            format!("{addr} is in use by another process: stop it or {other}")
        }
        ErrorKind::PermissionDenied => format!(
            "{addr} ({setting}) may not be bound by this user (ports below 1024 need root or \
             CAP_NET_BIND_SERVICE): {other} with a port above 1023"
        ),
        ErrorKind::AddrNotAvailable => format!(
            "{addr} ({setting}) is not an address of this host: {other} with one of its \
             addresses (0.0.0.0 for all of them)"
        ),
        _ => format!("cannot listen on {addr} ({setting}): {}: {other}", plain(e)),
    }
}

/// A TLS file that cannot be read, or does not hold what it should.
fn check_tls_files(config: &BrokerConfig) -> Result<(), StartError> {
    let Some(files) = &config.tls else {
        return Ok(());
    };
    let named = [
        ("ssl_certfile", Some(&files.certfile)),
        ("ssl_keyfile", Some(&files.keyfile)),
        ("ssl_cafile", files.cafile.as_ref()),
    ];
    for (name, path) in named {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::File::open(path) {
            return Err(StartError::Tls(format!(
                "{} {} cannot be read ({}): {} naming a readable PEM file",
                config.setting(name),
                path.display(),
                plain(&e),
                config.how_to_set(name, "PATH")
            )));
        }
    }
    Ok(())
}
