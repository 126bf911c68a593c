//! DescribeUserScramCredentials v0 and AlterUserScramCredentials v0 (KIP-554): the SCRAM
//! credentials SASL logins are checked against, in the metadata store. A client sends the
//! salted password (never the password); the broker keeps StoredKey and ServerKey. Each user
//! gets one result, with Kafka's codes: RESOURCE_NOT_FOUND for a user (or a deleted mechanism)
//! without credentials, DUPLICATE_RESOURCE for a user named twice, UNSUPPORTED_SASL_MECHANISM,
//! UNACCEPTABLE_CREDENTIAL for an empty name, iterations outside 4096–16384, a salted password
//! that is not the mechanism's hash length (32 bytes for SCRAM-SHA-256, 64 for SCRAM-SHA-512:
//! anything else could never match a login) or a salt empty or longer than 1 KiB.
//! Describing needs DESCRIBE on the cluster, altering ALTER, else CLUSTER_AUTHORIZATION_FAILED
//! (for the request, or for every user named, in name order, as Kafka answers).

use std::collections::{BTreeMap, HashMap};

use futures::FutureExt;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::server::sasl::credentials;
use crate::server::sasl::scram::{
    ScramCredential, ScramMechanism, MAX_ITERATIONS, MAX_SALT_BYTES, MIN_ITERATIONS,
};

/// Kafka's codes newer than the codec's list of errors.
const RESOURCE_NOT_FOUND: i16 = 91;
const DUPLICATE_RESOURCE: i16 = 92;
const UNACCEPTABLE_CREDENTIAL: i16 = 93;

type Refusal = (i16, String);

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) async fn describe(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeUserScramCredentialsRequest = request.body()?;
    if !access.allows_cluster(Operation::Describe) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        let response = DescribeUserScramCredentialsResponse::default()
            .with_error_code(denied.code())
            .with_error_message(Some(text(denied.to_string())));
        return encode_response(request.correlation_id, request.api_version, &response);
    }
    let response = match credentials::described(&broker.log.catalog).await {
        Ok(stored) => described(
            &stored,
            body.users
                .map(|u| u.into_iter().map(|u| u.name.to_string()).collect()),
        ),
        Err(error) => DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::KafkaStorageError.code())
            .with_error_message(Some(text(format!("cannot read credentials: {error}")))),
    };
    encode_response(request.correlation_id, request.api_version, &response)
}

/// `asked`: None or none for every user with credentials (as Kafka reads both).
fn described(
    stored: &BTreeMap<String, Vec<(ScramMechanism, u32)>>,
    asked: Option<Vec<String>>,
) -> DescribeUserScramCredentialsResponse {
    let asked = match asked {
        Some(users) if !users.is_empty() => users,
        _ => stored.keys().cloned().collect(),
    };
    let mut times: HashMap<&str, usize> = HashMap::new();
    for user in &asked {
        *times.entry(user.as_str()).or_default() += 1;
    }
    let mut results = Vec::new();
    let mut answered = std::collections::HashSet::new();
    for user in asked.iter().filter(|u| answered.insert(u.as_str())) {
        let result = DescribeUserScramCredentialsResult::default().with_user(text(user.clone()));
        let result = match (times[user.as_str()], stored.get(user)) {
            (2.., _) => result
                .with_error_code(DUPLICATE_RESOURCE)
                .with_error_message(Some(text(format!("user {user} is named more than once")))),
            (_, None) => result
                .with_error_code(RESOURCE_NOT_FOUND)
                .with_error_message(Some(text(format!("user {user} has no SCRAM credentials")))),
            (_, Some(credentials)) => result.with_credential_infos(
                credentials
                    .iter()
                    .map(|(m, iterations)| {
                        CredentialInfo::default()
                            .with_mechanism(m.code())
                            .with_iterations(*iterations as i32)
                    })
                    .collect(),
            ),
        };
        results.push(result);
    }
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

pub(crate) async fn alter(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: AlterUserScramCredentialsRequest = request.body()?;
    if !access.allows_cluster(Operation::Alter) {
        let denied = ResponseError::ClusterAuthorizationFailed;
        let mut users = users_of(&body);
        users.sort();
        let refused = users
            .into_iter()
            .map(|user| (user, Err((denied.code(), denied.to_string()))))
            .collect();
        return encode_response(
            request.correlation_id,
            request.api_version,
            &altered(refused),
        );
    }
    let catalog = &broker.log.catalog;
    let stored = match credentials::described(catalog).await {
        Ok(stored) => stored,
        Err(error) => {
            let message = format!("cannot read credentials: {error}");
            let failed = users_of(&body)
                .into_iter()
                .map(|user| {
                    (
                        user,
                        Err((ResponseError::KafkaStorageError.code(), message.clone())),
                    )
                })
                .collect();
            return encode_response(
                request.correlation_id,
                request.api_version,
                &altered(failed),
            );
        }
    };
    let (mut outcomes, upserts, deletes) = plan(&body, &stored);
    if !(upserts.is_empty() && deletes.is_empty()) {
        if let Err(error) = credentials::alter(catalog, upserts, deletes).await {
            let message = format!("cannot store credentials: {error}");
            for outcome in outcomes.values_mut().filter(|o| o.is_ok()) {
                *outcome = Err((ResponseError::KafkaStorageError.code(), message.clone()));
            }
        }
    }
    let results = users_of(&body)
        .into_iter()
        .map(|user| {
            let outcome = outcomes.remove(&user).unwrap_or(Ok(()));
            (user, outcome)
        })
        .collect();
    encode_response(
        request.correlation_id,
        request.api_version,
        &altered(results),
    )
}

/// Every user the request names, once, in the order first named.
fn users_of(body: &AlterUserScramCredentialsRequest) -> Vec<String> {
    let named = body
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(body.upsertions.iter().map(|u| u.name.to_string()));
    let mut users: Vec<String> = Vec::new();
    for user in named {
        if !users.contains(&user) {
            users.push(user);
        }
    }
    users
}

type Planned = (
    HashMap<String, Result<(), Refusal>>,
    Vec<(String, ScramMechanism, ScramCredential)>,
    Vec<(String, ScramMechanism)>,
);

/// Each user's outcome, and the writes of the users without a refusal (a user with one
/// changes nothing, as in Kafka).
fn plan(
    body: &AlterUserScramCredentialsRequest,
    stored: &BTreeMap<String, Vec<(ScramMechanism, u32)>>,
) -> Planned {
    let mut outcomes: HashMap<String, Result<(), Refusal>> = HashMap::new();
    let mut seen: HashMap<(String, i8), usize> = HashMap::new();
    let named = body
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .chain(
            body.upsertions
                .iter()
                .map(|u| (u.name.to_string(), u.mechanism)),
        );
    for key in named {
        *seen.entry(key).or_default() += 1;
    }
    let mut refuse = |user: &str, refusal: Refusal| {
        let outcome = outcomes.entry(user.to_string()).or_insert(Ok(()));
        if outcome.is_ok() {
            *outcome = Err(refusal);
        }
    };
    let mut deletes = Vec::new();
    for d in &body.deletions {
        let user = d.name.to_string();
        match check(&user, d.mechanism, seen[&(user.clone(), d.mechanism)]) {
            Err(refusal) => refuse(&user, refusal),
            Ok(mechanism) => {
                let has = stored
                    .get(&user)
                    .is_some_and(|c| c.iter().any(|(m, _)| *m == mechanism));
                if has {
                    deletes.push((user, mechanism));
                } else {
                    let message = format!("user {user} has no {} credential", mechanism.name());
                    refuse(&user, (RESOURCE_NOT_FOUND, message));
                }
            }
        }
    }
    let mut upserts = Vec::new();
    for u in &body.upsertions {
        let user = u.name.to_string();
        let checked = check(&user, u.mechanism, seen[&(user.clone(), u.mechanism)])
            .and_then(|m| check_upsertion(m, u).map(|iterations| (m, iterations)));
        match checked {
            Err(refusal) => refuse(&user, refusal),
            Ok((mechanism, iterations)) => {
                let credential = ScramCredential::from_salted(
                    mechanism,
                    &u.salted_password,
                    u.salt.to_vec(),
                    iterations,
                );
                upserts.push((user, mechanism, credential));
            }
        }
    }
    upserts.retain(|(user, _, _)| !matches!(outcomes.get(user), Some(Err(_))));
    deletes.retain(|(user, _)| !matches!(outcomes.get(user), Some(Err(_))));
    (outcomes, upserts, deletes)
}

/// The upsertion's iterations, if its credential is acceptable.
fn check_upsertion(
    mechanism: ScramMechanism,
    u: &ScramCredentialUpsertion,
) -> Result<u32, Refusal> {
    let unacceptable = |message: String| Err((UNACCEPTABLE_CREDENTIAL, message));
    let iterations = u32::try_from(u.iterations).unwrap_or(0);
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
        return unacceptable(format!(
            "iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}, not {}",
            u.iterations
        ));
    }
    if u.salted_password.len() != mechanism.output_len() {
        return unacceptable(format!(
            "a {} salted password is {} bytes (the hash of the password), not {}",
            mechanism.name(),
            mechanism.output_len(),
            u.salted_password.len()
        ));
    }
    if u.salt.is_empty() || u.salt.len() > MAX_SALT_BYTES {
        return unacceptable(format!(
            "the salt must be 1 to {MAX_SALT_BYTES} bytes, not {}",
            u.salt.len()
        ));
    }
    Ok(iterations)
}

fn check(user: &str, mechanism: i8, times: usize) -> Result<ScramMechanism, Refusal> {
    if user.is_empty() {
        return Err((
            UNACCEPTABLE_CREDENTIAL,
            "the user name must not be empty".into(),
        ));
    }
    if times > 1 {
        return Err((
            DUPLICATE_RESOURCE,
            format!("user {user} is altered more than once for one mechanism"),
        ));
    }
    ScramMechanism::from_code(mechanism).ok_or_else(|| {
        (
            ResponseError::UnsupportedSaslMechanism.code(),
            format!("unknown SCRAM mechanism {mechanism}: 1 is SCRAM-SHA-256, 2 SCRAM-SHA-512"),
        )
    })
}

fn altered(results: Vec<(String, Result<(), Refusal>)>) -> AlterUserScramCredentialsResponse {
    let results = results.into_iter().map(|(user, outcome)| {
        let result = AlterUserScramCredentialsResult::default().with_user(text(user));
        match outcome {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(text(message))),
        }
    });
    AlterUserScramCredentialsResponse::default().with_results(results.collect())
}

/// Dispatch's entry for DescribeUserScramCredentials (a [`super::Handler`]).
pub(crate) fn handle_describe(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { describe(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for AlterUserScramCredentials (a [`super::Handler`]).
pub(crate) fn handle_alter(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { alter(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialDeletion;

    use super::*;

    fn upsert(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        let hash_len = ScramMechanism::from_code(mechanism).map_or(32, |m| m.output_len());
        ScramCredentialUpsertion::default()
            .with_name(text(name))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(Bytes::from_static(b"salt"))
            .with_salted_password(Bytes::from(vec![7; hash_len]))
    }

    #[test]
    fn salted_passwords_are_the_hash_length_and_salts_are_bounded() {
        let refusal = |u: ScramCredentialUpsertion| {
            let m = ScramMechanism::from_code(u.mechanism).unwrap();
            check_upsertion(m, &u).err().map(|(code, message)| {
                assert_eq!(code, UNACCEPTABLE_CREDENTIAL);
                message
            })
        };
        assert_eq!(refusal(upsert("a", 1, 4096)), None);
        assert_eq!(refusal(upsert("a", 2, 16384)), None);
        let short = upsert("a", 1, 4096).with_salted_password(Bytes::from_static(b"abc"));
        assert_eq!(
            refusal(short).unwrap(),
            "a SCRAM-SHA-256 salted password is 32 bytes (the hash of the password), not 3"
        );
        let sha256_for_512 = upsert("a", 2, 4096).with_salted_password(Bytes::from(vec![7; 32]));
        assert!(refusal(sha256_for_512).unwrap().contains("64 bytes"));
        let longest = upsert("a", 1, 4096).with_salt(Bytes::from(vec![1; MAX_SALT_BYTES]));
        assert_eq!(refusal(longest), None);
        let huge = upsert("a", 1, 4096).with_salt(Bytes::from(vec![1; 1 << 20]));
        assert_eq!(
            refusal(huge).unwrap(),
            "the salt must be 1 to 1024 bytes, not 1048576"
        );
        let empty = upsert("a", 1, 4096).with_salt(Bytes::new());
        assert!(refusal(empty).is_some());
        assert!(refusal(upsert("a", 1, 4095)).is_some());
        assert!(refusal(upsert("a", 1, 16385)).is_some());
    }

    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(text(name))
            .with_mechanism(mechanism)
    }

    #[test]
    fn alterations_are_checked_per_user_as_kafka_does() {
        let mut stored = BTreeMap::new();
        stored.insert("bob".to_string(), vec![(ScramMechanism::Sha512, 4096)]);
        let body = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![
                delete("bob", 2),
                delete("carol", 1),
                delete("dave", 1),
            ])
            .with_upsertions(vec![
                upsert("alice", 2, 8192),
                upsert("dave", 1, 4096),
                upsert("erin", 3, 4096),
                upsert("frank", 1, 100),
                upsert("", 1, 4096),
            ]);
        let (outcomes, upserts, deletes) = plan(&body, &stored);
        let code = |user: &str| {
            outcomes
                .get(user)
                .map_or(0, |o| o.as_ref().err().map_or(0, |e| e.0))
        };
        assert_eq!(code("alice"), 0);
        assert_eq!(code("bob"), 0);
        assert_eq!(code("carol"), RESOURCE_NOT_FOUND);
        assert_eq!(
            code("dave"),
            DUPLICATE_RESOURCE,
            "deleted and upserted for one mechanism"
        );
        assert_eq!(code("erin"), ResponseError::UnsupportedSaslMechanism.code());
        assert_eq!(code("frank"), UNACCEPTABLE_CREDENTIAL);
        assert_eq!(code(""), UNACCEPTABLE_CREDENTIAL);
        let written: Vec<_> = upserts
            .iter()
            .map(|(u, m, c)| (u.as_str(), *m, c.iterations))
            .collect();
        assert_eq!(written, [("alice", ScramMechanism::Sha512, 8192)]);
        assert_eq!(deletes, [("bob".to_string(), ScramMechanism::Sha512)]);
        assert_eq!(
            users_of(&body),
            ["bob", "carol", "dave", "alice", "erin", "frank", ""]
        );
    }

    #[test]
    fn descriptions_name_each_user_once() {
        let mut stored = BTreeMap::new();
        stored.insert(
            "alice".to_string(),
            vec![
                (ScramMechanism::Sha256, 4096),
                (ScramMechanism::Sha512, 8192),
            ],
        );
        let all = described(&stored, None);
        assert_eq!(all.results.len(), 1);
        assert_eq!(described(&stored, Some(vec![])).results, all.results);
        let infos: Vec<_> = all.results[0]
            .credential_infos
            .iter()
            .map(|c| (c.mechanism, c.iterations))
            .collect();
        assert_eq!(infos, [(1, 4096), (2, 8192)]);
        let asked = described(
            &stored,
            Some(vec!["nobody".into(), "alice".into(), "alice".into()]),
        );
        let codes: Vec<_> = asked
            .results
            .iter()
            .map(|r| (r.user.as_str(), r.error_code))
            .collect();
        assert_eq!(
            codes,
            [
                ("nobody", RESOURCE_NOT_FOUND),
                ("alice", DUPLICATE_RESOURCE)
            ]
        );
    }

    #[tokio::test]
    async fn describing_needs_describe_and_altering_alter_on_the_cluster() {
        use crate::auth::acl::ResourceType::Cluster;
        use crate::auth::acl::CLUSTER_NAME;
        use crate::protocol::header::testing::{read_response, request};
        use crate::server::handlers::testing::{alice, allow};
        use kafka_protocol::messages::ApiKey;

        let t = crate::broker::tests::broker(1 << 20).await;
        let denied = ResponseError::ClusterAuthorizationFailed.code();
        let describer = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::Describe)]);
        let alterer = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::Alter)]);
        let alter = AlterUserScramCredentialsRequest::default()
            .with_upsertions(vec![upsert("zed", 1, 4096), upsert("bob", 1, 4096)]);
        let asked = request(ApiKey::AlterUserScramCredentials, 0, &alter);
        let frame = alter_as(&t.broker, &asked, &describer).await;
        let (_, altered): (_, AlterUserScramCredentialsResponse) = read_response(frame, 0);
        let results: Vec<_> = altered
            .results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect();
        // every user refused, in name order, as Kafka answers
        assert_eq!(
            results,
            [("bob".to_string(), denied), ("zed".to_string(), denied)]
        );
        let describe = DescribeUserScramCredentialsRequest::default().with_users(None);
        let asked = request(ApiKey::DescribeUserScramCredentials, 0, &describe);
        let read = |frame| read_response::<DescribeUserScramCredentialsResponse>(frame, 0).1;
        let producer = alice(vec![allow(
            Cluster,
            CLUSTER_NAME,
            Operation::IdempotentWrite,
        )]);
        let refused = read(super::describe(&t.broker, &asked, &producer).await.unwrap());
        assert_eq!(refused.error_code, denied);
        assert!(refused.results.is_empty());
        // nothing was stored by the refused alteration
        let stored = read(
            super::describe(&t.broker, &asked, &describer)
                .await
                .unwrap(),
        );
        assert_eq!((stored.error_code, stored.results.len()), (0, 0));
        let asked = request(ApiKey::AlterUserScramCredentials, 0, &alter);
        let frame = alter_as(&t.broker, &asked, &alterer).await;
        let (_, altered): (_, AlterUserScramCredentialsResponse) = read_response(frame, 0);
        assert!(altered.results.iter().all(|r| r.error_code == 0));
    }

    async fn alter_as(broker: &Broker, asked: &Request, access: &Access) -> bytes::Bytes {
        super::alter(broker, asked, access).await.unwrap()
    }
}
