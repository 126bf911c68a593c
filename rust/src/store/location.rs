//! A storage location as users write it, one URL for the broker, the CLI, polars and Spark:
//! `s3://BUCKET/NAMESPACE?region=REGION&endpoint=URL`, `file:///DIR/NAMESPACE` (or the path
//! `DIR/NAMESPACE`) and `memory://NAMESPACE`. The namespace is the key prefix every object of
//! a cluster sits under; `DIR` is a single broker's data directory.

use std::fmt;
use std::path::{Path, PathBuf};

use url::Url;

use super::StorageLocation;

/// The namespace of a `memory://` location that names none (the brokers' default).
const DEFAULT_NAMESPACE: &str = "default";

/// What an S3 location's query may set.
const S3_PARAMETERS: [&str; 2] = ["region", "endpoint"];

/// A parsed storage location: which store, with the S3 settings its URL gave, and the namespace.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    pub(crate) store: StorageLocation,
    pub(crate) namespace: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LocationError {
    #[error("{0}: an S3 location names a bucket and a namespace: s3://BUCKET/NAMESPACE")]
    S3Parts(String),
    #[error("{given}: {reason}")]
    Unparsable { given: String, reason: String },
    #[error(
        "{given}: unknown S3 parameter {name}; an s3:// location takes {}",
        S3_PARAMETERS.join(" and ")
    )]
    S3Parameter { given: String, name: String },
    #[error(
        "{given}: unknown kind of storage {scheme}://; use s3://BUCKET/NAMESPACE, \
         file:///DIR/NAMESPACE (or the path DIR/NAMESPACE) or memory://NAMESPACE"
    )]
    Scheme { given: String, scheme: String },
    #[error(
        "{0}: a local location is a broker's data directory joined with its namespace, \
         e.g. ./kafscale-data/default"
    )]
    LocalParts(String),
}

impl Location {
    pub(crate) fn new(store: StorageLocation, namespace: &str) -> Location {
        Location {
            store,
            namespace: namespace.to_string(),
        }
    }

    pub(crate) fn parse(given: &str) -> Result<Location, LocationError> {
        let Some((scheme, rest)) = given.split_once("://") else {
            return Location::local(given, Path::new(given));
        };
        match scheme {
            "s3" => Location::s3(given),
            // A file URL's path, as written: `file:///srv/data/default` or `file://./data/default`.
            "file" => Location::local(given, Path::new(rest)),
            "memory" => Ok(Location {
                store: StorageLocation::Memory,
                namespace: match rest.trim_matches('/') {
                    "" => DEFAULT_NAMESPACE.to_string(),
                    namespace => namespace.to_string(),
                },
            }),
            _ => Err(LocationError::Scheme {
                given: given.to_string(),
                scheme: scheme.to_string(),
            }),
        }
    }

    fn s3(given: &str) -> Result<Location, LocationError> {
        let url = Url::parse(given).map_err(|e| LocationError::Unparsable {
            given: given.to_string(),
            reason: e.to_string(),
        })?;
        let bucket = url.host_str().unwrap_or_default();
        // A namespace may hold slashes (`s3://bucket/team/orders`): every object is under it.
        let namespace = url.path().trim_matches('/');
        if bucket.is_empty() || namespace.is_empty() {
            return Err(LocationError::S3Parts(given.to_string()));
        }
        let (mut region, mut endpoint) = (None, None);
        for (name, value) in url.query_pairs() {
            match name.as_ref() {
                "region" => region = Some(value.into_owned()),
                "endpoint" => endpoint = Some(value.into_owned()),
                _ => {
                    return Err(LocationError::S3Parameter {
                        given: given.to_string(),
                        name: name.into_owned(),
                    })
                }
            }
        }
        Ok(Location {
            store: StorageLocation::S3 {
                bucket: bucket.to_string(),
                region,
                endpoint,
                credentials: None,
            },
            namespace: namespace.to_string(),
        })
    }

    fn local(given: &str, path: &Path) -> Result<Location, LocationError> {
        let (Some(dir), Some(namespace)) = (path.parent(), path.file_name()) else {
            return Err(LocationError::LocalParts(given.to_string()));
        };
        let dir = match dir.as_os_str().is_empty() {
            true => PathBuf::from("."),
            false => dir.to_path_buf(),
        };
        Ok(Location {
            store: StorageLocation::LocalDir(dir),
            namespace: namespace.to_string_lossy().into_owned(),
        })
    }

    pub(crate) fn scheme(&self) -> &'static str {
        match self.store {
            StorageLocation::S3 { .. } => "s3",
            StorageLocation::LocalDir(_) => "file",
            StorageLocation::Memory => "memory",
        }
    }

    /// The S3 region named in the URL, if any.
    pub(crate) fn region(&self) -> Option<&str> {
        match &self.store {
            StorageLocation::S3 { region, .. } => region.as_deref(),
            _ => None,
        }
    }

    /// The directory a local location's namespace directory is in (a broker's data directory).
    pub(crate) fn directory(&self) -> Option<&Path> {
        match &self.store {
            StorageLocation::LocalDir(dir) => Some(dir),
            _ => None,
        }
    }
}

/// The location as a URL that parses back to it (credentials are never part of it).
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.store {
            StorageLocation::S3 {
                bucket, endpoint, ..
            } => {
                let mut url = Url::parse(&format!("s3://{bucket}/")).map_err(|_| fmt::Error)?;
                url.set_path(&self.namespace);
                if let Some(region) = self.region() {
                    url.query_pairs_mut().append_pair("region", region);
                }
                if let Some(endpoint) = endpoint {
                    url.query_pairs_mut().append_pair("endpoint", endpoint);
                }
                write!(f, "{url}")
            }
            StorageLocation::LocalDir(dir) => {
                write!(f, "{}", dir.join(&self.namespace).display())
            }
            StorageLocation::Memory => write!(f, "memory://{}", self.namespace),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3_parts(location: &Location) -> (&str, &str, Option<&str>) {
        match &location.store {
            StorageLocation::S3 {
                bucket,
                region,
                endpoint,
                ..
            } => (
                bucket,
                region.as_deref().unwrap_or_default(),
                endpoint.as_deref(),
            ),
            other => panic!("not S3: {other:?}"),
        }
    }

    #[test]
    fn s3_urls_name_bucket_namespace_and_settings() {
        let location = Location::parse(
            "s3://logs/team/orders?region=eu-west-1&endpoint=http://127.0.0.1:9000",
        )
        .unwrap();
        assert_eq!(
            s3_parts(&location),
            ("logs", "eu-west-1", Some("http://127.0.0.1:9000"))
        );
        assert_eq!(location.namespace, "team/orders");
        assert_eq!(location.scheme(), "s3");
        let plain = Location::parse("s3://logs/default/").unwrap();
        assert_eq!(s3_parts(&plain), ("logs", "", None));
        assert_eq!(plain.region(), None);
        assert_eq!(plain.namespace, "default");
    }

    #[test]
    fn what_an_s3_url_lacks_or_adds_is_refused() {
        for given in ["s3://logs", "s3://logs/", "s3:///default"] {
            assert_eq!(
                Location::parse(given).unwrap_err(),
                LocationError::S3Parts(given.into())
            );
        }
        let error = Location::parse("s3://logs/default?regoin=x").unwrap_err();
        assert!(error.to_string().contains("unknown S3 parameter regoin"));
        let error = Location::parse("gs://logs/default").unwrap_err();
        assert!(error.to_string().contains("unknown kind of storage gs://"));
    }

    #[test]
    fn local_paths_and_file_urls_are_a_data_directory_and_a_namespace() {
        for (given, dir) in [
            ("./data/default", "./data"),
            ("file:///srv/data/default/", "/srv/data"),
            ("file://data/default", "data"),
            ("default", "."),
        ] {
            let location = Location::parse(given).unwrap();
            assert_eq!(location.directory(), Some(Path::new(dir)), "{given}");
            assert_eq!(location.namespace, "default", "{given}");
            assert_eq!(location.scheme(), "file");
        }
        assert_eq!(
            Location::parse("/").unwrap_err(),
            LocationError::LocalParts("/".into())
        );
    }

    #[test]
    fn memory_locations_default_their_namespace() {
        assert_eq!(Location::parse("memory://").unwrap().namespace, "default");
        let location = Location::parse("memory://test").unwrap();
        assert_eq!(
            (location.scheme(), location.namespace.as_str()),
            ("memory", "test")
        );
    }

    #[test]
    fn a_location_prints_as_a_url_that_parses_back() {
        for given in [
            "s3://logs/team/orders?region=eu-west-1&endpoint=http%3A%2F%2F127.0.0.1%3A9000",
            "s3://logs/default",
            "memory://test",
            "/srv/data/default",
        ] {
            let printed = Location::parse(given).unwrap().to_string();
            assert_eq!(printed, given);
            assert_eq!(Location::parse(&printed).unwrap().to_string(), given);
        }
    }
}
