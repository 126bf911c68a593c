//! DescribeGroups, ListGroups and DeleteGroups across the bridge: the requests as the group
//! coordinator sees them, and its answers (classes Python constructs, re-exported by `kafscale.groups.protocol`)
//! encoded at the request's version.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult as WireDeleted;
use kafka_protocol::messages::describe_groups_response::{
    DescribedGroup as WireGroup, DescribedGroupMember as WireMember,
};
use kafka_protocol::messages::list_groups_response::ListedGroup as WireListed;
use kafka_protocol::messages::{self as wire, GroupId};
use pyo3::prelude::*;

use crate::control::text::{read, wire, wire_opt};

/// Kafka's "authorized operations not computed" (DescribeGroups v3+; there are no ACLs).
const OPERATIONS_OMITTED: i32 = i32::MIN;

fn group_ids(groups: &[GroupId]) -> Vec<String> {
    groups.iter().map(|g| read(g)).collect()
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeGroupsRequest {
    groups: Vec<String>,
    include_authorized_operations: bool,
}

impl DescribeGroupsRequest {
    /// Authorized operations can be asked for from v3; the codec reads false before.
    pub(crate) fn new(request: &wire::DescribeGroupsRequest) -> Self {
        DescribeGroupsRequest {
            groups: group_ids(&request.groups),
            include_authorized_operations: request.include_authorized_operations,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListGroupsRequest {
    states_filter: Vec<String>,
    types_filter: Vec<String>,
}

impl ListGroupsRequest {
    /// The state filter exists from v4, the type filter from v5; the codec reads them empty
    /// (no filter) before.
    pub(crate) fn new(request: &wire::ListGroupsRequest) -> Self {
        let all = |list: &[_]| list.iter().map(read).collect();
        ListGroupsRequest {
            states_filter: all(&request.states_filter),
            types_filter: all(&request.types_filter),
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeleteGroupsRequest {
    groups_names: Vec<String>,
}

impl DeleteGroupsRequest {
    pub(crate) fn new(request: &wire::DeleteGroupsRequest) -> Self {
        DeleteGroupsRequest {
            groups_names: group_ids(&request.groups_names),
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribedGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_metadata: Vec<u8>,
    pub member_assignment: Vec<u8>,
}

#[pymethods]
impl DescribedGroupMember {
    #[new]
    #[pyo3(signature = (member_id, group_instance_id, client_id, client_host, member_metadata, member_assignment))]
    fn new(
        member_id: String,
        group_instance_id: Option<String>,
        client_id: String,
        client_host: String,
        member_metadata: Vec<u8>,
        member_assignment: Vec<u8>,
    ) -> Self {
        DescribedGroupMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            member_metadata,
            member_assignment,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribedGroup {
    pub error_code: i16,
    pub group_id: String,
    pub group_state: String,
    pub protocol_type: String,
    pub protocol_data: String,
    pub members: Vec<DescribedGroupMember>,
    pub authorized_operations: i32,
}

#[pymethods]
impl DescribedGroup {
    #[new]
    #[pyo3(signature = (error_code, group_id, group_state = String::new(), protocol_type = String::new(), protocol_data = String::new(), members = Vec::new(), authorized_operations = i32::MIN))]
    fn new(
        error_code: i16,
        group_id: String,
        group_state: String,
        protocol_type: String,
        protocol_data: String,
        members: Vec<DescribedGroupMember>,
        authorized_operations: i32,
    ) -> Self {
        DescribedGroup {
            error_code,
            group_id,
            group_state,
            protocol_type,
            protocol_data,
            members,
            authorized_operations,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DescribeGroupsResponse {
    pub groups: Vec<DescribedGroup>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl DescribeGroupsResponse {
    #[new]
    #[pyo3(signature = (groups, throttle_time_ms = 0))]
    fn new(groups: Vec<DescribedGroup>, throttle_time_ms: i32) -> Self {
        DescribeGroupsResponse {
            groups,
            throttle_time_ms,
        }
    }
}

/// Authorized operations exist from v3, static members' instance ids from v4.
pub(crate) fn describe_groups(
    answer: DescribeGroupsResponse,
    version: i16,
) -> wire::DescribeGroupsResponse {
    let groups = answer.groups.into_iter().map(|g| {
        let members = g.members.into_iter().map(|m| {
            WireMember::default()
                .with_member_id(wire(m.member_id))
                .with_group_instance_id(if version >= 4 {
                    wire_opt(m.group_instance_id)
                } else {
                    None
                })
                .with_client_id(wire(m.client_id))
                .with_client_host(wire(m.client_host))
                .with_member_metadata(m.member_metadata.into())
                .with_member_assignment(m.member_assignment.into())
        });
        WireGroup::default()
            .with_error_code(g.error_code)
            .with_group_id(GroupId(wire(g.group_id)))
            .with_group_state(wire(g.group_state))
            .with_protocol_type(wire(g.protocol_type))
            .with_protocol_data(wire(g.protocol_data))
            .with_members(members.collect())
            .with_authorized_operations(if version >= 3 {
                g.authorized_operations
            } else {
                OPERATIONS_OMITTED
            })
    });
    wire::DescribeGroupsResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_groups(groups.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub group_state: String,
    pub group_type: String,
}

#[pymethods]
impl ListedGroup {
    #[new]
    #[pyo3(signature = (group_id, protocol_type, group_state, group_type = String::from("classic")))]
    fn new(
        group_id: String,
        protocol_type: String,
        group_state: String,
        group_type: String,
    ) -> Self {
        ListedGroup {
            group_id,
            protocol_type,
            group_state,
            group_type,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ListGroupsResponse {
    pub error_code: i16,
    pub groups: Vec<ListedGroup>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl ListGroupsResponse {
    #[new]
    #[pyo3(signature = (error_code, groups = Vec::new(), throttle_time_ms = 0))]
    fn new(error_code: i16, groups: Vec<ListedGroup>, throttle_time_ms: i32) -> Self {
        ListGroupsResponse {
            error_code,
            groups,
            throttle_time_ms,
        }
    }
}

/// The group state exists from v4, the group type from v5.
pub(crate) fn list_groups(answer: ListGroupsResponse, version: i16) -> wire::ListGroupsResponse {
    let only_from = |since: i16, value: String| {
        if version >= since {
            value
        } else {
            String::new()
        }
    };
    let groups = answer.groups.into_iter().map(|g| {
        WireListed::default()
            .with_group_id(GroupId(wire(g.group_id)))
            .with_protocol_type(wire(g.protocol_type))
            .with_group_state(wire(only_from(4, g.group_state)))
            .with_group_type(wire(only_from(5, g.group_type)))
    });
    wire::ListGroupsResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_error_code(answer.error_code)
        .with_groups(groups.collect())
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeletableGroupResult {
    pub group_id: String,
    pub error_code: i16,
}

#[pymethods]
impl DeletableGroupResult {
    #[new]
    #[pyo3(signature = (group_id, error_code))]
    fn new(group_id: String, error_code: i16) -> Self {
        DeletableGroupResult {
            group_id,
            error_code,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeleteGroupsResponse {
    pub results: Vec<DeletableGroupResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl DeleteGroupsResponse {
    #[new]
    #[pyo3(signature = (results, throttle_time_ms = 0))]
    fn new(results: Vec<DeletableGroupResult>, throttle_time_ms: i32) -> Self {
        DeleteGroupsResponse {
            results,
            throttle_time_ms,
        }
    }
}

pub(crate) fn delete_groups(answer: DeleteGroupsResponse) -> wire::DeleteGroupsResponse {
    let results = answer.results.into_iter().map(|r| {
        WireDeleted::default()
            .with_group_id(GroupId(wire(r.group_id)))
            .with_error_code(r.error_code)
    });
    wire::DeleteGroupsResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_results(results.collect())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::control::body::ControlBody;
    use crate::control::testing::{advertised, decoded, on_the_wire};

    fn s(text: &'static str) -> StrBytes {
        StrBytes::from_static_str(text)
    }

    fn id(text: &'static str) -> GroupId {
        GroupId(s(text))
    }

    #[test]
    fn describe_groups_request_at_every_version() {
        for v in advertised(ApiKey::DescribeGroups) {
            let request = wire::DescribeGroupsRequest::default()
                .with_groups(vec![id("a"), id("b")])
                .with_include_authorized_operations(v >= 3);
            let ControlBody::DescribeGroups(body) = decoded(ApiKey::DescribeGroups, v, &request)
            else {
                panic!("v{v} decoded as another API");
            };
            let expected = DescribeGroupsRequest {
                groups: vec!["a".into(), "b".into()],
                include_authorized_operations: v >= 3,
            };
            assert_eq!(DescribeGroupsRequest::new(&body), expected, "v{v}");
        }
    }

    #[test]
    fn list_groups_filters_only_where_the_version_has_them() {
        for v in advertised(ApiKey::ListGroups) {
            let request = wire::ListGroupsRequest::default()
                .with_states_filter(if v >= 4 { vec![s("Stable")] } else { vec![] })
                .with_types_filter(if v >= 5 { vec![s("classic")] } else { vec![] });
            let ControlBody::ListGroups(body) = decoded(ApiKey::ListGroups, v, &request) else {
                panic!("v{v} decoded as another API");
            };
            let request = ListGroupsRequest::new(&body);
            assert_eq!(
                request.states_filter,
                if v >= 4 { vec!["Stable"] } else { vec![] }
            );
            assert_eq!(
                request.types_filter,
                if v >= 5 { vec!["classic"] } else { vec![] }
            );
        }
    }

    #[test]
    fn delete_groups_request_and_answer_at_every_version() {
        for v in advertised(ApiKey::DeleteGroups) {
            let request = wire::DeleteGroupsRequest::default().with_groups_names(vec![id("g")]);
            let ControlBody::DeleteGroups(body) = decoded(ApiKey::DeleteGroups, v, &request) else {
                panic!("v{v} decoded as another API");
            };
            assert_eq!(DeleteGroupsRequest::new(&body).groups_names, ["g"]);
            let not_found = ResponseError::GroupIdNotFound.code();
            let answer = DeleteGroupsResponse {
                results: vec![
                    DeletableGroupResult {
                        group_id: "g".into(),
                        error_code: 0,
                    },
                    DeletableGroupResult {
                        group_id: "h".into(),
                        error_code: not_found,
                    },
                ],
                throttle_time_ms: 5,
            };
            let wire = on_the_wire(&delete_groups(answer), v);
            assert_eq!(wire.throttle_time_ms, 5);
            let results: Vec<_> = wire
                .results
                .iter()
                .map(|r| (r.group_id.as_str(), r.error_code))
                .collect();
            assert_eq!(results, [("g", 0), ("h", not_found)]);
        }
    }

    fn described() -> DescribeGroupsResponse {
        DescribeGroupsResponse {
            groups: vec![DescribedGroup {
                error_code: 0,
                group_id: "g".into(),
                group_state: "Stable".into(),
                protocol_type: "consumer".into(),
                protocol_data: "range".into(),
                members: vec![DescribedGroupMember {
                    member_id: "m-1".into(),
                    group_instance_id: Some("static-1".into()),
                    client_id: "client".into(),
                    client_host: "10.0.0.1".into(),
                    member_metadata: vec![1, 2],
                    member_assignment: vec![3],
                }],
                authorized_operations: 0b1000,
            }],
            throttle_time_ms: 5,
        }
    }

    #[test]
    fn describe_groups_answer_at_every_version() {
        for v in advertised(ApiKey::DescribeGroups) {
            let wire = on_the_wire(&describe_groups(described(), v), v);
            assert_eq!(wire.throttle_time_ms, if v >= 1 { 5 } else { 0 });
            let group = &wire.groups[0];
            assert_eq!(
                (group.error_code, group.group_id.as_str()),
                (0, "g"),
                "v{v}"
            );
            assert_eq!(group.group_state.as_str(), "Stable");
            assert_eq!(group.protocol_type.as_str(), "consumer");
            assert_eq!(group.protocol_data.as_str(), "range");
            let operations = if v >= 3 { 0b1000 } else { i32::MIN };
            assert_eq!(group.authorized_operations, operations, "v{v}");
            let member = &group.members[0];
            assert_eq!(member.member_id.as_str(), "m-1");
            let instance = member.group_instance_id.as_deref();
            assert_eq!(instance, (v >= 4).then_some("static-1"), "v{v}");
            assert_eq!(
                (member.client_id.as_str(), member.client_host.as_str()),
                ("client", "10.0.0.1")
            );
            assert_eq!(member.member_metadata.as_ref(), [1, 2]);
            assert_eq!(member.member_assignment.as_ref(), [3]);
        }
    }

    #[test]
    fn list_groups_answer_at_every_version() {
        let answer = ListGroupsResponse {
            error_code: 0,
            groups: vec![ListedGroup {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                group_state: "Stable".into(),
                group_type: "classic".into(),
            }],
            throttle_time_ms: 5,
        };
        for v in advertised(ApiKey::ListGroups) {
            let wire = on_the_wire(&list_groups(answer.clone(), v), v);
            assert_eq!(wire.throttle_time_ms, if v >= 1 { 5 } else { 0 });
            assert_eq!(wire.error_code, 0);
            let group = &wire.groups[0];
            assert_eq!(
                (group.group_id.as_str(), group.protocol_type.as_str()),
                ("g", "consumer")
            );
            let state = if v >= 4 { "Stable" } else { "" };
            assert_eq!(group.group_state.as_str(), state, "v{v}");
            let kind = if v >= 5 { "classic" } else { "" };
            assert_eq!(group.group_type.as_str(), kind, "v{v}");
        }
    }
}
