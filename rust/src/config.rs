//! The broker's settings as the core sees them. Python builds and validates the user-facing
//! `kafscale.config.Settings`; the core extracts the same attribute names.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use pyo3::FromPyObject;

use crate::auth::authorizer::AuthorizerSettings;
use crate::log::index::DEFAULT_INDEX_INTERVAL;
use crate::log::LogSettings;
use crate::meta::catalog::{BrokerRecord, Endpoint};
use crate::store::StorageLocation;

/// One Kafka listener (Kafka's `listeners` and `advertised.listeners`): its name, which is
/// also its security protocol (PLAINTEXT or SSL), the address it binds and the endpoint
/// clients that come in on it are given for every broker.
#[derive(Debug, Clone, FromPyObject)]
pub(crate) struct ListenerConfig {
    pub name: String,
    pub bind: String,
    pub advertised_host: String,
    /// 0: the port the listener bound.
    pub advertised_port: i32,
}

impl ListenerConfig {
    pub(crate) fn is_tls(&self) -> bool {
        self.name == "SSL" || self.name == "SASL_SSL"
    }

    pub(crate) fn is_sasl(&self) -> bool {
        self.name.starts_with("SASL_")
    }
}

/// The TLS listeners' certificate, key and client authentication (Kafka's `ssl.*`), read
/// from PEM files and read again when they change.
#[derive(Debug, Clone, FromPyObject)]
pub(crate) struct TlsFiles {
    pub certfile: PathBuf,
    pub keyfile: PathBuf,
    /// CAs trusted for client certificates.
    pub cafile: Option<PathBuf>,
    /// `none`, `requested` or `required` (Kafka's `ssl.client.auth`).
    pub client_auth: String,
    pub reload_interval_ms: u64,
}

#[derive(Debug, Clone, FromPyObject)]
pub(crate) struct BrokerConfig {
    /// The first one is the listener other settings' addresses describe (the start-up line).
    pub listener_specs: Vec<ListenerConfig>,
    pub tls: Option<TlsFiles>,
    /// Kafka's `sasl.enabled.mechanisms`: comma-separated.
    pub sasl_enabled_mechanisms: String,
    pub sasl_users_file: Option<PathBuf>,
    /// Kafka's `connections.max.reauth.ms` (0: sessions never end).
    pub connections_max_reauth_ms: u64,
    /// Kafka's `sasl.server.max.receive.size`: the largest frame before authentication.
    pub sasl_server_max_receive_size: usize,
    pub connection_failed_authentication_delay_ms: u64,
    /// `none` or `acl` (Kafka's `authorizer.class.name`).
    pub authorizer: String,
    /// Kafka's `super.users`: principals separated by semicolons.
    pub super_users: String,
    pub allow_everyone_if_no_acl_found: bool,
    pub broker_id: i32,
    /// Kafka's `broker.rack`.
    pub broker_rack: Option<String>,
    pub data_dir: String,
    pub s3_bucket: Option<String>,
    pub s3_region: Option<String>,
    pub s3_endpoint: Option<String>,
    pub s3_namespace: String,
    pub use_memory_s3: bool,
    pub segment_bytes: usize,
    pub flush_interval_ms: u64,
    /// `interval` or `arrival` (see `LogSettings::flush_on_arrival`).
    pub flush_mode: String,
    pub wal_object_max_bytes: usize,
    pub wal_compaction_age_ms: u64,
    pub wal_compaction_interval_ms: u64,
    pub cache_bytes: usize,
    pub readahead_segments: usize,
    pub auto_create_topics: bool,
    pub default_partitions: i32,
    pub max_request_bytes: usize,
    pub max_message_bytes: usize,
    pub etcd_endpoints: Option<String>,
    pub etcd_username: Option<String>,
    pub etcd_password: Option<String>,
    pub lease_ttl_ms: u64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub retention_check_interval_ms: u64,
    pub metrics_addr: Option<String>,
    /// The operations endpoint speaks TLS with the SSL listeners' certificate.
    pub metrics_tls: bool,
    /// A file holding the bearer token `/metrics` requires.
    pub metrics_token_file: Option<PathBuf>,
    /// Connections the operations endpoint holds at once.
    pub metrics_max_connections: usize,
    /// From a request's first byte (or the TLS handshake's) to its last header.
    pub metrics_header_read_timeout_ms: u64,
    /// An operations connection with nothing read, written or being answered this long closes.
    pub metrics_idle_timeout_ms: u64,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    pub connections_max_idle_ms: u64,
    pub request_read_timeout_ms: u64,
    pub connection_max_inflight_bytes: usize,
    pub queued_max_request_bytes: usize,
    pub fetch_max_bytes: usize,
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    pub max_uncompressed_batch_bytes: usize,
    pub producer_id_expiration_ms: i64,
    /// Kafka's `log.roll.ms`: the default `segment.ms`.
    pub log_roll_ms: i64,
    /// Kafka's `log.cleaner.*`: the defaults of compacted topics' configs, the memory of a
    /// cleaning's offset map and the cleaner's pause between rounds.
    pub log_cleaner_min_cleanable_ratio: f64,
    pub log_cleaner_min_compaction_lag_ms: i64,
    pub log_cleaner_max_compaction_lag_ms: i64,
    pub log_cleaner_delete_retention_ms: i64,
    pub log_cleaner_dedupe_buffer_size: usize,
    pub log_cleaner_backoff_ms: u64,
    /// Kafka's `file.delete.delay.ms`: how long objects a cleaning replaced stay.
    pub file_delete_delay_ms: u64,
    /// Kafka's `transaction.max.timeout.ms`: the longest transaction timeout a producer gets.
    pub transaction_max_timeout_ms: i32,
    /// Kafka's `transactional.id.expiration.ms`: how long an idle transactional id is kept.
    pub transactional_id_expiration_ms: i64,
    /// What the user calls each setting (by attribute name): the environment variable for
    /// one set that way, otherwise its flag. Messages name settings this way.
    pub setting_names: HashMap<String, String>,
}

/// The command-line flag of the setting `name` (`ssl_certfile` → `--ssl-certfile`).
pub(crate) fn flag(name: &str) -> String {
    format!("--{}", name.replace('_', "-"))
}

impl BrokerConfig {
    /// The setting `name` (`s3_bucket`) as the user gave it: `--s3-bucket` or
    /// `KAFSCALE_S3_BUCKET`. One left at its default is named the way the user gave the
    /// others: as a variable when every one given was a variable, otherwise as a flag.
    pub(crate) fn setting(&self, name: &str) -> String {
        if let Some(given) = self.setting_names.get(name) {
            return given.clone();
        }
        let variables = !self.setting_names.is_empty()
            && self
                .setting_names
                .values()
                .all(|n| n.starts_with("KAFSCALE_"));
        if variables {
            format!("KAFSCALE_{}", name.to_ascii_uppercase())
        } else {
            flag(name)
        }
    }

    /// How to give the setting `name` another value: `pass --s3-bucket BUCKET` or
    /// `set KAFSCALE_S3_BUCKET=BUCKET`.
    pub(crate) fn how_to_set(&self, name: &str, value: &str) -> String {
        let setting = self.setting(name);
        if setting.starts_with("--") {
            format!("pass {setting} {value}")
        } else {
            format!("set {setting}={value}")
        }
    }

    /// The SASL listeners' settings (credentials stored under `catalog`).
    pub(crate) fn authorizer_settings(&self) -> AuthorizerSettings {
        AuthorizerSettings {
            enabled: self.authorizer == "acl",
            super_users: self
                .super_users
                .split(';')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
            allow_if_no_acl: self.allow_everyone_if_no_acl_found,
        }
    }

    /// This broker as it registers: every listener's advertised endpoint (ports bound by
    /// now), the first one's also as its host and port.
    pub(crate) fn broker_record(&self) -> BrokerRecord {
        let endpoints: Vec<Endpoint> = self
            .listener_specs
            .iter()
            .map(|l| Endpoint {
                listener: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .collect();
        let (host, port) = endpoints
            .first()
            .map_or((String::new(), 0), |e| (e.host.clone(), e.port));
        BrokerRecord {
            id: self.broker_id,
            host,
            port,
            endpoints,
            rack: self.broker_rack.clone(),
        }
    }

    /// Where segments go. Contradictory settings are an error, never a silent choice.
    pub(crate) fn storage(&self) -> Result<StorageLocation, String> {
        match (&self.s3_bucket, self.use_memory_s3) {
            (Some(_), true) => Err(format!(
                "{} and {} are both set: choose one",
                self.setting("use_memory_s3"),
                self.setting("s3_bucket")
            )),
            (None, true) => Ok(StorageLocation::Memory),
            (Some(bucket), false) => {
                let region = self.s3_region.clone().ok_or_else(|| {
                    format!(
                        "{} {bucket} needs a region as well: {}",
                        self.setting("s3_bucket"),
                        self.how_to_set("s3_region", "REGION")
                    )
                })?;
                Ok(StorageLocation::S3 {
                    bucket: bucket.clone(),
                    region: Some(region),
                    endpoint: self.s3_endpoint.clone(),
                    credentials: None,
                })
            }
            (None, false) => Ok(StorageLocation::LocalDir(PathBuf::from(&self.data_dir))),
        }
    }

    /// etcd client URLs when the broker runs in a cluster.
    pub(crate) fn etcd_endpoints(&self) -> Option<Vec<String>> {
        self.etcd_endpoints
            .as_deref()
            .map(|urls| urls.split(',').map(|u| u.trim().to_string()).collect())
    }

    pub(crate) fn etcd_credentials(&self) -> Option<(String, String)> {
        self.etcd_username.clone().zip(self.etcd_password.clone())
    }

    pub(crate) fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    pub(crate) fn retention_check_interval(&self) -> Duration {
        Duration::from_millis(self.retention_check_interval_ms.max(1))
    }

    pub(crate) fn metadata_path(&self) -> PathBuf {
        PathBuf::from(&self.data_dir).join("metadata.redb")
    }

    pub(crate) fn log_settings(&self) -> LogSettings {
        LogSettings {
            segment_bytes: self.segment_bytes,
            max_message_bytes: self.max_message_bytes,
            message_timestamp_before_max_ms: self.message_timestamp_before_max_ms,
            message_timestamp_after_max_ms: self.message_timestamp_after_max_ms,
            max_uncompressed_batch_bytes: self.max_uncompressed_batch_bytes,
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            flush_interval: Duration::from_millis(self.flush_interval_ms.max(1)),
            flush_on_arrival: self.flush_mode == "arrival",
            readahead_segments: self.readahead_segments,
            index_interval: DEFAULT_INDEX_INTERVAL,
            wal_object_max_bytes: self.wal_object_max_bytes.max(1),
            wal_compaction_age: Duration::from_millis(self.wal_compaction_age_ms),
            wal_compaction_interval: Duration::from_millis(self.wal_compaction_interval_ms.max(1)),
            log_roll_ms: self.log_roll_ms,
        }
    }
}
