//! The `Broker` handle Python holds: start and stop a `running::Running`, hand control
//! requests to Python, and the topic calls the admin handlers make.
//! Blocking work runs with the GIL released; async methods return Python awaitables whose work
//! runs on the broker's own runtime.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use super::control::ControlRequest;
use super::errors::{api_error, start_error};
use super::group_store::GroupStore;
use super::runtime::on_runtime;
use super::transactions::TransactionView;
use crate::broker::Topic;
use crate::config::BrokerConfig;
use crate::error::ApiError;
use crate::metrics::{GroupSnapshot, GroupState};
use crate::running::Running;
use crate::transactions::coordinator::Members;

#[pyclass(frozen, get_all, module = "kafscale._core")]
pub(super) struct TopicInfo {
    name: String,
    topic_id: String,
    partitions: i32,
    configs: BTreeMap<String, String>,
}

impl From<&Topic> for TopicInfo {
    fn from(topic: &Topic) -> Self {
        TopicInfo {
            name: topic.record.name.clone(),
            topic_id: topic.record.id.to_string(),
            partitions: topic.record.partitions,
            configs: topic.record.configs.clone(),
        }
    }
}

/// `(group_id, state, member count, [(topic, partition, committed offset)])`
type ReportedGroup = (String, String, i64, Vec<(String, i32, i64)>);

#[pyclass(frozen, module = "kafscale._core")]
pub struct Broker {
    config: BrokerConfig,
    runtime: Arc<Runtime>,
    running: Mutex<Option<Arc<Running>>>,
}

impl Broker {
    fn running(&self) -> PyResult<Arc<Running>> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err("the broker is not started; call start() first"))
    }

    /// What the group coordinator tells the transaction coordinator about `group_id` in the
    /// producer's transaction.
    fn group_step<'py>(
        &self,
        py: Python<'py>,
        step: GroupStep,
        transactional_id: String,
        producer: (i64, i16),
        group_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            let group = Members::Group(&group_id);
            let transactions = &core.transactions;
            match step {
                GroupStep::Marked => transactions
                    .marked(&transactional_id, producer, group)
                    .await
                    .map_err(|e| {
                        api_error(ApiError::new(e, "reporting a transaction's offsets failed"))
                    }),
                GroupStep::Add => {
                    let added = transactions.add_implicitly(&transactional_id, producer, group);
                    if let Err(error) = added.await {
                        tracing::debug!(transactional_id, group_id, %error,
                            "a group was not added to its transaction");
                    }
                    Ok(())
                }
            }
        })
    }
}

/// See `Broker::group_step`.
enum GroupStep {
    /// Join the transaction (TxnOffsetCommit v5).
    Add,
    /// Its offsets are committed or dropped with the decided transaction.
    Marked,
}

#[pymethods]
impl Broker {
    #[new]
    fn new(settings: &Bound<'_, PyAny>) -> PyResult<Self> {
        let config: BrokerConfig = settings
            .extract()
            .map_err(|e| PyValueError::new_err(format!("broker settings: {e}")))?;
        config.storage().map_err(PyValueError::new_err)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("kafscale")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("starting the runtime: {e}")))?;
        Ok(Broker {
            config,
            runtime: Arc::new(runtime),
            running: Mutex::new(None),
        })
    }

    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let config = self.config.clone();
        let runtime = self.runtime.clone();
        let running = py
            .detach(move || runtime.block_on(Running::start(config)))
            .map_err(start_error)?;
        *self.running.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(running));
        Ok(())
    }

    /// Where the first listener is bound.
    #[getter]
    fn listen_addr(&self) -> PyResult<String> {
        Ok(self.running()?.listen_addrs[0].to_string())
    }

    fn describe(&self) -> PyResult<String> {
        let running = self.running()?;
        let config = &running.core.config;
        let listeners: Vec<String> = running
            .listen_addrs
            .iter()
            .zip(&config.listener_specs)
            .map(|(addr, l)| {
                let advertised = format!("{}:{}", l.advertised_host, l.advertised_port);
                format!("{addr} ({}, advertised {advertised})", l.name)
            })
            .collect();
        Ok(format!(
            "kafscale broker {} listening on {}; {}",
            config.broker_id,
            listeners.join(", "),
            running.core.describe_stores()
        ))
    }

    fn next_control_request<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            Ok(core.control.next().await.map(ControlRequest::from))
        })
    }

    fn create_topic<'py>(
        &self,
        py: Python<'py>,
        name: String,
        partitions: i32,
        configs: BTreeMap<String, String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            let topic = core
                .create_topic(&name, partitions, configs)
                .await
                .map_err(api_error)?;
            Ok(TopicInfo::from(topic.as_ref()))
        })
    }

    /// Deletes the topic, only if it has `topic_id` when one is given.
    #[pyo3(signature = (name, topic_id=None))]
    fn delete_topic<'py>(
        &self,
        py: Python<'py>,
        name: String,
        topic_id: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let id = topic_id.map(parse_topic_id).transpose()?;
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            core.delete_topic(&name, id).await.map_err(api_error)
        })
    }

    fn topic<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            Ok(core.topic(&name).map(|t| TopicInfo::from(t.as_ref())))
        })
    }

    /// The topic with this id (`TopicInfo.topic_id`'s text), or None; ValueError when it is
    /// not a UUID.
    fn topic_by_id<'py>(&self, py: Python<'py>, topic_id: &str) -> PyResult<Bound<'py, PyAny>> {
        let id = parse_topic_id(topic_id)?;
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            Ok(core.topic_by_id(id).map(|t| TopicInfo::from(t.as_ref())))
        })
    }

    fn list_topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            Ok(core
                .topics()
                .iter()
                .map(|t| TopicInfo::from(t.as_ref()))
                .collect::<Vec<_>>())
        })
    }

    fn alter_topic_configs<'py>(
        &self,
        py: Python<'py>,
        name: String,
        configs: BTreeMap<String, String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            let topic = core
                .alter_topic_configs(&name, configs)
                .await
                .map_err(api_error)?;
            Ok(TopicInfo::from(topic.as_ref()))
        })
    }

    fn create_partitions<'py>(
        &self,
        py: Python<'py>,
        name: String,
        count: i32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let core = self.running()?.core.clone();
        on_runtime(&self.runtime, py, async move {
            let topic = core
                .create_partitions(&name, count)
                .await
                .map_err(api_error)?;
            Ok(TopicInfo::from(topic.as_ref()))
        })
    }

    /// Only reads the current cluster view: it never waits while holding the GIL.
    fn coordinator_for(&self, group_id: &str) -> PyResult<Option<i32>> {
        let cluster = self.running()?.core.cluster();
        Ok(cluster.coordinator(group_id).map(|broker| broker.id))
    }

    /// A transactional id's record as this broker's mirror holds it, or None. Only reads the
    /// mirror: it never waits while holding the GIL.
    fn transaction(&self, transactional_id: &str) -> PyResult<Option<TransactionView>> {
        let core = self.running()?.core.clone();
        let record = core.transactions.mirrored(transactional_id);
        Ok(record.map(|r| TransactionView::new(transactional_id, &r)))
    }

    /// The decided transactions (PrepareCommit, PrepareAbort) with groups still to be told,
    /// as this broker's mirror holds them.
    fn decided_transactions(&self) -> PyResult<Vec<TransactionView>> {
        let core = self.running()?.core.clone();
        let all = core.transactions.all();
        let decided = all
            .iter()
            .filter(|(_, r)| r.state.preparing().is_some() && !r.unmarked_groups.is_empty());
        Ok(decided.map(|(id, r)| TransactionView::new(id, r)).collect())
    }

    /// Reports that the group coordinator made the decided transaction's offsets of `group_id`
    /// committed (or dropped them); raises KafkaApiError when the record could not be updated.
    fn transaction_group_marked<'py>(
        &self,
        py: Python<'py>,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let producer = (producer_id, producer_epoch);
        self.group_step(py, GroupStep::Marked, transactional_id, producer, group_id)
    }

    /// TxnOffsetCommit v5 (the second transaction protocol): adds `group_id` to the producer's
    /// transaction, as AddOffsetsToTxn would. What could not be added, the caller's check of
    /// the record (`transaction`) then refuses.
    fn transaction_add_group<'py>(
        &self,
        py: Python<'py>,
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group_id: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let producer = (producer_id, producer_epoch);
        self.group_step(py, GroupStep::Add, transactional_id, producer, group_id)
    }

    fn group_store(&self) -> PyResult<GroupStore> {
        let running = self.running()?;
        let catalog = &running.core.log.catalog;
        Ok(GroupStore::new(
            catalog.kv().clone(),
            catalog.groups_root(),
            self.runtime.clone(),
        ))
    }

    /// The coordinator's report on its groups, for the group and lag gauges: a list of
    /// `(group_id, state, member_count, [(topic, partition, committed_offset)])`.
    fn publish_group_metrics(&self, groups: Vec<ReportedGroup>) -> PyResult<()> {
        let snapshot = GroupSnapshot {
            groups: groups
                .into_iter()
                .map(|(group, state, members, offsets)| GroupState {
                    group,
                    state,
                    members,
                    offsets,
                })
                .collect(),
        };
        self.running()?.core.metrics.set_groups(snapshot);
        Ok(())
    }

    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let Some(running) = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Ok(());
        };
        let runtime = self.runtime.clone();
        py.detach(move || runtime.block_on(running.stop()));
        Ok(())
    }
}

/// A topic id as `TopicInfo.topic_id` gives it; ValueError when it is not a UUID.
fn parse_topic_id(topic_id: &str) -> PyResult<uuid::Uuid> {
    uuid::Uuid::parse_str(topic_id)
        .map_err(|e| PyValueError::new_err(format!("topic id {topic_id:?}: {e}")))
}
