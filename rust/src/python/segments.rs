//! `SegmentSource`: a topic's log in object storage (S3 or a local data directory) – committed
//! segments and the write-ahead runs after them – read into Arrow for Python without a broker.
//! Work runs on a small runtime of its own with the GIL released; record batches cross into
//! Python through the Arrow PyCapsule interface.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use tokio::runtime::Runtime;

use super::errors::{location_error, read_error};
use crate::analytics::columns::kafka_schema;
use crate::analytics::error::ReadError;
use crate::analytics::metadata::{etcd_snapshot, Metadata, TopicSnapshot};
use crate::analytics::reader::TopicReader;
use crate::analytics::scan::{BatchLimits, PartitionScan};
use crate::analytics::verify::{orphan_indexes, verify_segment};
use crate::store::{Location, S3Credentials, SegmentObject, SegmentStore, StorageLocation};

/// A problem as Python gets it: (object, offset, byte, message).
type ProblemRow = (String, Option<i64>, Option<u64>, String);

/// What `SegmentSource.log` returns (see there).
/// A segment as `SegmentSource` hands it out: (base, end, size, cleaning generation).
type SegmentRow = (i64, i64, u64, Option<u64>);
type LogRow = (i64, i64, Vec<SegmentRow>, Vec<(i64, i64, u64, String)>);

/// What `SegmentSource.verify` returns (see there).
type VerifiedSegment = (
    String,
    i64,
    Option<i64>,
    Option<i64>,
    u64,
    u64,
    Vec<ProblemRow>,
);

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kafscale-segments")
            .enable_all()
            .build()
            .expect("the segment reader runtime starts")
    })
}

/// The region of a bucket no setting names (the AWS SDKs' default as well).
const DEFAULT_REGION: &str = "us-east-1";

/// The store behind `location` (a storage URL, `store::location`), with S3 settings taken from
/// the arguments, else from the URL, else from the AWS environment variables. A local location
/// must be a namespace directory that exists (a broker's data directory itself is refused,
/// saying which directories in it to pass).
fn open_location(
    location: &str,
    endpoint: Option<String>,
    region: Option<String>,
    credentials: Option<S3Credentials>,
) -> PyResult<Location> {
    let mut parsed = Location::parse(location).map_err(location_error)?;
    match &mut parsed.store {
        StorageLocation::S3 {
            region: store_region,
            endpoint: store_endpoint,
            credentials: store_credentials,
            ..
        } => {
            *store_region = Some(
                region
                    .or(store_region.take())
                    .or_else(|| environment(&["AWS_REGION", "AWS_DEFAULT_REGION"]))
                    .unwrap_or_else(|| DEFAULT_REGION.to_string()),
            );
            *store_endpoint = endpoint
                .or(store_endpoint.take())
                .or_else(|| environment(&["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]));
            *store_credentials = credentials;
        }
        StorageLocation::LocalDir(dir) => {
            let path = dir.join(&parsed.namespace);
            if !path.is_dir() {
                return Err(PyValueError::new_err(format!(
                    "{location}: no such directory; give the broker's data directory joined \
                     with its namespace (e.g. ./data/default), or an s3://<bucket>/<namespace> URL"
                )));
            }
            if path.join("metadata.redb").is_file() {
                return Err(PyValueError::new_err(data_dir_given(location, &path)));
            }
        }
        StorageLocation::Memory => {
            return Err(PyValueError::new_err(format!(
                "{location}: a memory:// store lives inside the broker that runs it; read its \
                 records through the broker, or run the broker on s3:// or a data directory"
            )))
        }
    }
    Ok(parsed)
}

/// The first of the environment variables `names` that is set and not empty.
fn environment(names: &[&str]) -> Option<String> {
    names
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|value| !value.is_empty())
}

/// The error for a broker's data directory given without the namespace directory in it (where
/// its topics are): it names the directories to pass.
fn data_dir_given(location: &str, path: &Path) -> String {
    let entries = std::fs::read_dir(path).into_iter().flatten().flatten();
    let mut namespaces: Vec<String> = entries
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.path().display().to_string())
        .collect();
    namespaces.sort();
    let pass = match namespaces.is_empty() {
        true => format!(
            "{location}/NAMESPACE (the broker's --s3-namespace, default: default) once it has \
             stored data"
        ),
        false => namespaces.join(" or "),
    };
    format!("{location} is a broker's data directory, not a namespace in it; pass {pass}")
}

#[pyclass(frozen, module = "kafscale._core")]
pub struct SegmentSource {
    reader: Arc<TopicReader>,
    #[pyo3(get)]
    location: String,
}

impl SegmentSource {
    fn block_on<T: Send>(
        &self,
        py: Python<'_>,
        work: impl std::future::Future<Output = Result<T, ReadError>> + Send,
    ) -> PyResult<T> {
        py.detach(|| runtime().block_on(work))
            .map_err(|e| read_error(&self.location, e))
    }
}

#[pymethods]
impl SegmentSource {
    #[new]
    #[pyo3(signature = (location, *, max_uncompressed_batch_bytes, region=None, endpoint=None,
        access_key_id=None, secret_access_key=None, session_token=None, etcd_endpoints=None,
        read_committed=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        location: String,
        max_uncompressed_batch_bytes: usize,
        region: Option<String>,
        endpoint: Option<String>,
        access_key_id: Option<String>,
        secret_access_key: Option<String>,
        session_token: Option<String>,
        etcd_endpoints: Option<Vec<String>>,
        read_committed: bool,
    ) -> PyResult<SegmentSource> {
        let credentials = match (access_key_id, secret_access_key) {
            (Some(access_key_id), Some(secret_access_key)) => Some(S3Credentials {
                access_key_id,
                secret_access_key,
                session_token,
            }),
            (None, None) => None,
            _ => {
                return Err(PyValueError::new_err(
                    "give both access_key_id and secret_access_key, or neither (then the AWS \
                     environment variables are used)",
                ))
            }
        };
        let Location { store, namespace } =
            open_location(&location, endpoint, region, credentials)?;
        let store = SegmentStore::open(&store, &namespace)
            .map_err(|e| PyValueError::new_err(format!("{location}: {e}")))?;
        let metadata = etcd_endpoints.map(|endpoints| Metadata::Etcd {
            endpoints,
            namespace,
        });
        Ok(SegmentSource {
            reader: Arc::new(TopicReader::new(
                store,
                metadata,
                max_uncompressed_batch_bytes,
                read_committed,
            )),
            location,
        })
    }

    /// Where this source learns what is committed: "etcd", "published" (a single-node
    /// broker's data) or "segments" (none: the segments the storage holds).
    #[getter]
    fn metadata(&self, py: Python<'_>) -> PyResult<&'static str> {
        let metadata = self.block_on(py, self.reader.metadata())?;
        Ok(match metadata {
            Metadata::Etcd { .. } => "etcd",
            Metadata::Published => "published",
            Metadata::SegmentsOnly => "segments",
        })
    }

    /// The partition's committed log: `(log start, end, [(base, end, size, generation)] of its segments,
    /// [(base, end, length, object)] of the write-ahead runs after them)`. Offsets `log start..end` can
    /// be read.
    fn log(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<LogRow> {
        let log = self.block_on(py, self.reader.current_log(topic, partition))?;
        let segments = log.segments.iter();
        let runs = log.runs.iter();
        Ok((
            log.log_start,
            log.end,
            segments.map(segment_row).collect(),
            runs.map(|r| (r.base_offset, r.end_offset, r.length, r.object.clone()))
                .collect(),
        ))
    }

    /// `(partition, log start, end)` of each partition of `topic` that the metadata knows (the
    /// committed end; reading committed, the last stable offset); None without metadata or
    /// when it knows no such topic.
    fn committed_bounds(
        &self,
        py: Python<'_>,
        topic: &str,
    ) -> PyResult<Option<Vec<(i32, i64, i64)>>> {
        self.block_on(py, self.reader.bounds(topic))
    }

    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.block_on(py, self.reader.topics())
    }

    fn partitions(&self, py: Python<'_>, topic: &str) -> PyResult<Vec<i32>> {
        self.block_on(py, self.reader.partitions(topic))
    }

    /// (base offset, end offset, size in bytes, cleaning generation) of each segment, in
    /// offset order.
    fn segments(&self, py: Python<'_>, topic: &str, partition: i32) -> PyResult<Vec<SegmentRow>> {
        let segments = self.block_on(py, self.reader.segments(topic, partition))?;
        Ok(segments.iter().map(segment_row).collect())
    }

    /// (base offset, size in bytes, cleaning generation) of each segment object, in offset
    /// order, from the listing alone: unlike `segments`, no object is read, so a damaged
    /// segment cannot hide the rest.
    fn segment_objects(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
    ) -> PyResult<Vec<(i64, u64, Option<u64>)>> {
        let store = self.reader.store();
        let listed = self.block_on(py, async {
            Ok(store.list_partition(topic, partition).await?)
        })?;
        Ok(listed
            .iter()
            .filter(|s| s.kind == SegmentObject::Data)
            .map(|s| (s.base_offset, s.size, s.generation))
            .collect())
    }

    fn offset_for_timestamp(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> PyResult<Option<i64>> {
        self.block_on(
            py,
            self.reader
                .offset_for_timestamp(topic, partition, timestamp),
        )
    }

    /// Checks one segment and its index end to end: `(object, base offset, first offset,
    /// last offset, batches, records, [(object, offset, byte, message)])`. Corrupt bytes are
    /// reported as problems; only storage failures raise.
    fn verify(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        base_offset: i64,
        generation: Option<u64>,
    ) -> PyResult<VerifiedSegment> {
        let store = self.reader.store();
        let check = self.block_on(py, async {
            Ok(verify_segment(store, topic, partition, base_offset, generation).await?)
        })?;
        let problems = check
            .problems
            .into_iter()
            .map(|p| (p.object, p.offset, p.byte, p.message))
            .collect();
        Ok((
            check.object,
            check.base_offset,
            check.first_offset,
            check.last_offset,
            check.batches,
            check.records,
            problems,
        ))
    }

    /// Index objects of the partition without their segment object, as `[(object, offset,
    /// byte, message)]` problems, from one listing.
    fn orphan_indexes(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
    ) -> PyResult<Vec<ProblemRow>> {
        let store = self.reader.store();
        let problems = self.block_on(py, async {
            Ok(orphan_indexes(store, topic, partition).await?)
        })?;
        Ok(problems
            .into_iter()
            .map(|p| (p.object, p.offset, p.byte, p.message))
            .collect())
    }

    #[pyo3(signature = (topic, partition, start_offset, end_offset, *, include_headers,
        batch_rows, batch_bytes))]
    #[allow(clippy::too_many_arguments)]
    fn scan(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        start_offset: i64,
        end_offset: i64,
        include_headers: bool,
        batch_rows: usize,
        batch_bytes: usize,
    ) -> PyResult<RecordBatchStream> {
        let log = self.block_on(py, self.reader.current_log(topic, partition))?;
        let limits = BatchLimits {
            rows: batch_rows.max(1),
            bytes: batch_bytes.max(1),
            max_uncompressed: self.reader.max_uncompressed(),
        };
        let scan = PartitionScan::new(
            self.reader.clone(),
            topic,
            partition,
            &log,
            start_offset.max(log.log_start)..end_offset.min(log.end),
            include_headers,
            limits,
        );
        Ok(RecordBatchStream {
            scan,
            location: self.location.clone(),
        })
    }
}

/// The record batches of one partition range, in offset order.
#[pyclass(module = "kafscale._core")]
pub struct RecordBatchStream {
    scan: PartitionScan,
    location: String,
}

#[pymethods]
impl RecordBatchStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<ArrowBatch>> {
        let scan = &mut self.scan;
        let next = py.detach(|| runtime().block_on(scan.next_batch()));
        match next {
            Ok(batch) => Ok(batch.map(|batch| ArrowBatch { batch })),
            Err(e) => Err(read_error(&self.location, e)),
        }
    }
}

/// One record batch, handed to pyarrow (or polars) through `__arrow_c_array__`.
#[pyclass(frozen, module = "kafscale._core")]
pub struct ArrowBatch {
    batch: RecordBatch,
}

#[pymethods]
impl ArrowBatch {
    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        // The batch is exported in its own schema; callers cast if they asked for another.
        let _ = requested_schema;
        let data = StructArray::from(self.batch.clone()).into_data();
        let schema = FFI_ArrowSchema::try_from(data.data_type())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let array = FFI_ArrowArray::new(&data);
        Ok((
            PyCapsule::new(py, schema, Some(c"arrow_schema".into()))?,
            PyCapsule::new(py, array, Some(c"arrow_array".into()))?,
        ))
    }
}

/// No rows, in the schema of Spark's Kafka source (Python reads the schema off it).
#[pyfunction]
pub(super) fn empty_kafka_batch(include_headers: bool) -> ArrowBatch {
    ArrowBatch {
        batch: RecordBatch::new_empty(kafka_schema(include_headers)),
    }
}

/// `(partition, log start, committed end)` of each partition.
fn bounds(snapshot: &TopicSnapshot) -> Vec<(i32, i64, i64)> {
    let records = snapshot.records.iter();
    records
        .map(|(p, r)| (*p, r.log_start_offset, snapshot.committed_end(*p)))
        .collect()
}

/// (partition, log start offset, committed end) of each partition of `topic`, from etcd
/// (nothing for an unknown topic).
#[pyfunction]
pub(super) fn committed_bounds(
    py: Python<'_>,
    endpoints: Vec<String>,
    namespace: &str,
    topic: &str,
) -> PyResult<Vec<(i32, i64, i64)>> {
    let snapshot = py
        .detach(|| runtime().block_on(etcd_snapshot(&endpoints, namespace, topic)))
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(snapshot.as_ref().map(bounds).unwrap_or_default())
}

fn segment_row(s: &crate::analytics::scan::SegmentRef) -> SegmentRow {
    (s.base_offset, s.end_offset, s.size, s.generation)
}
