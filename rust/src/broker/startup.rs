//! Why the broker did not start, in the user's terms: each message is one line that says
//! what is wrong, names the setting as the user gave it (`--s3-bucket` or
//! `KAFSCALE_S3_BUCKET`, see `BrokerConfig::setting`) and what to do about it.

use std::path::Path;

use crate::config::BrokerConfig;
use crate::meta::catalog::CatalogError;
use crate::meta::embedded::EmbeddedOpenError;
use crate::meta::etcd::{login_refused, ConnectError};
use crate::meta::kv::MetaError;
use crate::store::{OpenError, Unusable, PROBE_TIMEOUT};

/// Why the broker did not open. Each message is the whole line for the user.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenFailure {
    /// The data directory cannot be created or written.
    #[error("{0}")]
    DataDir(String),
    /// The object store cannot be set up, or does not answer as it should.
    #[error("{0}")]
    Storage(String),
    /// The metadata store cannot be opened or read.
    #[error("{0}")]
    Metadata(String),
    /// This broker could not register in the cluster.
    #[error("joining the cluster: {0}")]
    Joining(CatalogError),
}

/// What to do when no S3 credentials are configured.
const GIVE_CREDENTIALS: &str = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
     AWS_SESSION_TOKEN for temporary ones), or AWS_SKIP_SIGNATURE=true if the bucket allows \
     anonymous access";
const CHECK_CREDENTIALS: &str = "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
     AWS_SESSION_TOKEN), and that they may list and write the bucket";

/// An io::Error without its "(os error N)" suffix, which tells people nothing.
pub(crate) fn plain(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The S3 endpoint as the user configured it: `--s3-endpoint URL`, `AWS_ENDPOINT_URL URL`,
/// or AWS itself.
fn s3_at(config: &BrokerConfig) -> String {
    match (&config.s3_endpoint, std::env::var("AWS_ENDPOINT_URL")) {
        (Some(url), _) => format!("the S3 server at {} {url}", config.setting("s3_endpoint")),
        (None, Ok(url)) if !url.is_empty() => format!("the S3 server at AWS_ENDPOINT_URL {url}"),
        _ => format!(
            "AWS S3 (region {})",
            config.s3_region.as_deref().unwrap_or("unset")
        ),
    }
}

fn bucket(config: &BrokerConfig) -> String {
    format!(
        "{} {}",
        config.setting("s3_bucket"),
        config.s3_bucket.as_deref().unwrap_or("")
    )
}

/// The object store could not even be set up.
pub(crate) fn store_not_opened(config: &BrokerConfig, e: OpenError) -> String {
    match e {
        OpenError::Directory { dir, error } => data_dir_unusable(config, &dir, &error),
        OpenError::NoCredentials { .. } => format!(
            "no S3 credentials found for {} (the instance metadata service is not asked when \
             an endpoint is set): {GIVE_CREDENTIALS}",
            s3_at(config)
        ),
        OpenError::S3 { message, .. } => format!(
            "{}: {message}: check {}, {} and the AWS_* environment variables",
            bucket(config),
            config.setting("s3_region"),
            config.setting("s3_endpoint")
        ),
    }
}

/// The object store answered the start-up probe with an error, or not at all.
pub(crate) fn store_unusable(config: &BrokerConfig, problem: Unusable) -> String {
    let at = s3_at(config);
    let name = config.s3_bucket.as_deref().unwrap_or("");
    match problem {
        Unusable::NoBucket => format!(
            "bucket {name} does not exist on {at}: create it, or {} naming an existing one",
            config.how_to_set("s3_bucket", "BUCKET")
        ),
        Unusable::Denied(said) => {
            format!("{at} refused the credentials for bucket {name} ({said}): {CHECK_CREDENTIALS}")
        }
        Unusable::WrongRegion(said) => format!(
            "bucket {name} is not in region {} ({said}): {} with the bucket's region",
            config.s3_region.as_deref().unwrap_or(""),
            config.how_to_set("s3_region", "REGION")
        ),
        Unusable::Unreachable(cause) => {
            let cause = cause.trim_end_matches(|c: char| c == '.' || c.is_whitespace());
            if config.s3_endpoint.is_some() {
                format!(
                    "cannot reach {at} ({cause}): start the S3 server there, or {} of a \
                     running one",
                    config.how_to_set("s3_endpoint", "URL")
                )
            } else {
                format!("cannot reach {at} ({cause}): check this host's network access to S3")
            }
        }
        Unusable::NoAnswer => format!(
            "{at} did not answer within {} s: check that the S3 server is up and reachable \
             from this host",
            PROBE_TIMEOUT.as_secs()
        ),
        Unusable::NoCredentials(said) => format!(
            "no S3 credentials found for {at}: none are set and fetching them from this \
             host's role failed ({said}): {GIVE_CREDENTIALS}"
        ),
        Unusable::Other(said) => format!(
            "{at} refused to list the bucket {name} ({said}): check {}, {} and the AWS credentials",
            config.setting("s3_bucket"),
            config.setting("s3_region")
        ),
    }
}

/// The data directory (embedded metadata store, local segments) cannot be created or written.
pub(crate) fn data_dir_unusable(config: &BrokerConfig, dir: &Path, error: &str) -> String {
    let error = match error.find(" (os error") {
        Some(at) => &error[..at],
        None => error,
    };
    format!(
        "{} {} cannot be used ({error}): {} naming a directory this user can write to",
        config.setting("data_dir"),
        dir.display(),
        config.how_to_set("data_dir", "DIR")
    )
}

/// Creates the data directory if needed and checks that files can be written in it, so a
/// wrong one fails the start with its setting's name rather than deep in a store.
pub(crate) fn check_data_dir(config: &BrokerConfig) -> Result<(), OpenFailure> {
    let dir = Path::new(&config.data_dir);
    let failed =
        |e: std::io::Error| OpenFailure::DataDir(data_dir_unusable(config, dir, &plain(&e)));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let probe = dir.join(".kafscale-write-check");
    std::fs::write(&probe, b"").map_err(failed)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The embedded metadata store in the data directory cannot be opened (most often: another
/// broker holds it).
pub(crate) fn embedded_unusable(config: &BrokerConfig, error: &EmbeddedOpenError) -> String {
    let message = error.to_string();
    let message = message.trim_end_matches('.');
    format!(
        "{message}: stop the other broker using {} {}, or {} naming a directory of its own",
        config.setting("data_dir"),
        config.data_dir,
        config.how_to_set("data_dir", "DIR")
    )
}

/// The etcd session could not be opened.
pub(crate) fn etcd_unusable(config: &BrokerConfig, e: ConnectError) -> String {
    let setting = config.setting("etcd_endpoints");
    match e {
        ConnectError::Unreachable { endpoints, cause } => format!(
            "cannot reach etcd at {setting} {endpoints} ({cause}): start etcd there, or {} \
             with the client URLs of a running one",
            config.how_to_set("etcd_endpoints", "URLS")
        ),
        ConnectError::Auth { endpoints, answer } => {
            let user = config.setting("etcd_username");
            let password = config.setting("etcd_password");
            let remedy = match (
                answer.contains("not enabled"),
                config.etcd_username.is_some(),
            ) {
                (true, true) => format!("unset {user} and {password} (etcd has no users)"),
                (_, true) => format!("check {user} and {password}"),
                (_, false) => format!(
                    "{} and {password} of an etcd user",
                    config.how_to_set("etcd_username", "USER")
                ),
            };
            format!("etcd at {setting} {endpoints} refused the login ({answer}): {remedy}")
        }
        ConnectError::NoAnswer { endpoints } => format!(
            "etcd at {setting} {endpoints} did not answer in time: check that it is running \
             and healthy (etcdctl endpoint health)"
        ),
        ConnectError::Other { endpoints, answer } => format!(
            "etcd at {setting} {endpoints} refused this broker's session ({answer}): check \
             etcd's health and its logs"
        ),
    }
}

/// The metadata store's first read failed: for etcd most likely a login it refused.
pub(crate) fn metadata_unusable(config: &BrokerConfig, e: &MetaError) -> String {
    let text = e.to_string();
    match (&config.etcd_endpoints, login_refused(&text)) {
        (Some(endpoints), Some(answer)) => etcd_unusable(
            config,
            ConnectError::Auth {
                endpoints: endpoints.clone(),
                answer,
            },
        ),
        (Some(endpoints), None) => format!(
            "etcd at {} {endpoints} failed the first read ({text}): check etcd's health and \
             its logs",
            config.setting("etcd_endpoints")
        ),
        (None, _) => format!(
            "the embedded metadata store in {} {} failed the first read ({text}): check the \
             directory's disk",
            config.setting("data_dir"),
            config.data_dir
        ),
    }
}
