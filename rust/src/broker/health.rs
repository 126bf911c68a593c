//! Readiness: can this broker do its job right now? Each check answers on its own, so a
//! failing probe says which part is down.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Broker;

/// A probe must answer before Kubernetes' own probe timeout (1 s by default is too short for
/// a cold S3 listing; deploy/ sets longer): each check gets at most this long.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) struct Check {
    pub name: &'static str,
    pub problem: Option<String>,
}

impl Broker {
    /// The metadata store answers, the object store answers, and the broker is serving:
    /// registered in the cluster view and not shutting down.
    pub(crate) async fn readiness(&self) -> Vec<Check> {
        let catalog = &self.log.catalog;
        let metadata = tokio::time::timeout(CHECK_TIMEOUT, catalog.kv().get(catalog.root()));
        let objects = tokio::time::timeout(CHECK_TIMEOUT, self.log.store.probe());
        let (metadata, objects) = tokio::join!(metadata, objects);
        let timed_out = || format!("no answer within {} s", CHECK_TIMEOUT.as_secs());
        let metadata = match metadata {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(timed_out()),
        };
        let objects = match objects {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(timed_out()),
        };
        let serving = if self.stopping.load(Ordering::Acquire) {
            Some("shutting down".to_string())
        } else if !self.cluster().brokers.contains_key(&self.config.broker_id) {
            Some("not registered in the cluster view (metadata session lost?)".to_string())
        } else {
            None
        };
        vec![
            Check {
                name: "metadata store",
                problem: metadata,
            },
            Check {
                name: "object store",
                problem: objects,
            },
            Check {
                name: "serving",
                problem: serving,
            },
        ]
    }
}
