//! A broker started and serving: its listeners bound, the core open, the accept loop running;
//! and its orderly stop. The Python handle (`python::broker`) only holds one of these.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Broker;
use crate::config::BrokerConfig;

/// Why a broker did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{setting} {addr}: cannot listen: {source}")]
    Listen {
        setting: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Open(String),
}

pub struct Running {
    pub core: Arc<Broker>,
    pub listen_addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// The accept loop; after the stop it ends once every connection sent what it owes.
    server: Mutex<Option<JoinHandle<()>>>,
}

async fn listen(setting: &'static str, addr: &str) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen {
            setting,
            addr: addr.to_string(),
            source,
        })
}

impl Running {
    /// Binds the Kafka listener (and the operations endpoint's, if configured) before opening
    /// the core, so a taken port fails fast; an ephemeral port (0) is advertised as bound.
    pub async fn start(mut config: BrokerConfig) -> Result<Running, StartError> {
        let listener = listen("KAFSCALE_BROKER_ADDR", &config.broker_addr).await?;
        let listen_addr = listener.local_addr().map_err(|source| StartError::Listen {
            setting: "KAFSCALE_BROKER_ADDR",
            addr: config.broker_addr.clone(),
            source,
        })?;
        if config.broker_port == 0 {
            config.broker_port = i32::from(listen_addr.port());
        }
        let ops_listener = match &config.metrics_addr {
            Some(addr) => Some(listen("KAFSCALE_METRICS_ADDR", addr).await?),
            None => None,
        };
        let core = Broker::open(config).await.map_err(StartError::Open)?;
        let (stop, stopped) = watch::channel(false);
        let server = tokio::spawn(crate::server::serve(core.clone(), listener, stopped));
        if let Some(ops_listener) = ops_listener {
            tokio::spawn(crate::server::ops_endpoint::serve(
                ops_listener,
                core.clone(),
            ));
        }
        Ok(Running {
            core,
            listen_addr,
            stop,
            server: Mutex::new(Some(server)),
        })
    }

    /// Stops accepting, flushes and hands off what this broker holds, waits for every
    /// connection to get what it is owed, then leaves the cluster.
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        self.core.shutdown().await;
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = server {
            let _ = server.await;
        }
        self.core.leave().await;
    }
}
