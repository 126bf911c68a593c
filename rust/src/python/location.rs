//! `StorageLocation`: the one parser of storage URLs (`store::location`) as the broker's
//! settings, the CLI, polars and Spark read them.

use pyo3::prelude::*;

use super::errors::location_error;
use crate::store::{Location, StorageLocation};

/// A parsed `s3://BUCKET/NAMESPACE?region=…&endpoint=…`, `file:///DIR/NAMESPACE` (or the path
/// `DIR/NAMESPACE`) or `memory://NAMESPACE`.
#[pyclass(frozen, name = "StorageLocation", module = "kafscale._core")]
pub(crate) struct PyLocation {
    pub(crate) location: Location,
}

#[pymethods]
impl PyLocation {
    #[new]
    fn new(url: &str) -> PyResult<PyLocation> {
        let location = Location::parse(url).map_err(location_error)?;
        Ok(PyLocation { location })
    }

    /// "s3", "file" or "memory".
    #[getter]
    fn scheme(&self) -> &'static str {
        self.location.scheme()
    }

    #[getter]
    fn namespace(&self) -> &str {
        &self.location.namespace
    }

    #[getter]
    fn bucket(&self) -> Option<&str> {
        match &self.location.store {
            StorageLocation::S3 { bucket, .. } => Some(bucket),
            _ => None,
        }
    }

    #[getter]
    fn region(&self) -> Option<&str> {
        self.location.region()
    }

    #[getter]
    fn endpoint(&self) -> Option<&str> {
        match &self.location.store {
            StorageLocation::S3 { endpoint, .. } => endpoint.as_deref(),
            _ => None,
        }
    }

    /// A local location's data directory (its namespace directory is in it).
    #[getter]
    fn directory(&self) -> Option<String> {
        let dir = self.location.directory()?;
        Some(dir.to_string_lossy().into_owned())
    }

    fn __str__(&self) -> String {
        self.location.to_string()
    }

    fn __repr__(&self) -> String {
        format!("StorageLocation({:?})", self.location.to_string())
    }
}
