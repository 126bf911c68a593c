//! Who a quota is for and which quota applies to a client, as in Kafka: an entity is a user, a
//! client id, both, or an IP address, each named or the type's default (`<default>`), and a
//! client's quota of one kind is the first of these that sets it:
//! user and client id, user and default client id, user, default user and client id, default
//! user and default client id, default user, client id, default client id. What the quota
//! meters is shared by the clients the entity names alike: a user's quota by all of the user's
//! clients, a default user quota by each user's.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

/// One part of an entity: the user, the client id or the IP address. None as a name: the
/// type's default.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) enum Name {
    Default,
    Named(String),
}

impl Name {
    fn from_wire(name: Option<&str>) -> Name {
        name.map_or(Name::Default, |n| Name::Named(n.to_string()))
    }

    pub(crate) fn as_wire(&self) -> Option<&str> {
        match self {
            Name::Default => None,
            Name::Named(n) => Some(n),
        }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Name::Default => f.write_str("<default>"),
            Name::Named(n) => f.write_str(n),
        }
    }
}

pub(crate) const USER: &str = "user";
pub(crate) const CLIENT_ID: &str = "client-id";
pub(crate) const IP: &str = "ip";

/// A quota's entity: a user and/or a client id, or an IP address alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct QuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<Name>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Name>,
}

/// Why a request's entity is not one a quota can be set for (INVALID_REQUEST).
pub(crate) type EntityError = String;

impl QuotaEntity {
    /// The entity of an AlterClientQuotas entry or a DescribeClientQuotas answer: (type, name)
    /// pairs, a name of None being the type's default.
    pub(crate) fn from_wire<'a>(
        parts: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<QuotaEntity, EntityError> {
        let mut entity = QuotaEntity::default();
        for (kind, name) in parts {
            let slot = match kind {
                USER => &mut entity.user,
                CLIENT_ID => &mut entity.client_id,
                IP => &mut entity.ip,
                other => {
                    return Err(format!(
                        "unknown entity type {other:?}: give user, client-id or ip"
                    ))
                }
            };
            if slot.is_some() {
                return Err(format!("entity type {kind} named twice"));
            }
            if name == Some("") && kind != CLIENT_ID {
                return Err(format!(
                    "an empty {kind} name: leave the name out for the default"
                ));
            }
            let name = match (kind, name) {
                // One address, one spelling: the one connections are looked up by.
                (IP, Some(address)) => match address.parse::<std::net::IpAddr>() {
                    Ok(ip) => Name::Named(ip.to_string()),
                    Err(_) => return Err(format!("{address:?} is not an IP address")),
                },
                _ => Name::from_wire(name),
            };
            *slot = Some(name);
        }
        let named = [&entity.user, &entity.client_id, &entity.ip];
        match named.iter().filter(|n| n.is_some()).count() {
            0 => Err("an empty entity: name a user, a client id or both, or an IP address".into()),
            _ if entity.ip.is_some() && (entity.user.is_some() || entity.client_id.is_some()) => {
                Err("an IP address cannot be combined with a user or client id".into())
            }
            _ => Ok(entity),
        }
    }

    /// The (type, name) pairs, in Kafka's order of types.
    pub(crate) fn parts(&self) -> Vec<(&'static str, &Name)> {
        let parts = [
            (USER, &self.user),
            (CLIENT_ID, &self.client_id),
            (IP, &self.ip),
        ];
        parts
            .into_iter()
            .filter_map(|(kind, name)| Some((kind, name.as_ref()?)))
            .collect()
    }

    pub(crate) fn is_ip(&self) -> bool {
        self.ip.is_some()
    }
}

impl fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .parts()
            .into_iter()
            .map(|(kind, name)| format!("{kind}={name}"))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum QuotaKind {
    /// Bytes of Produce requests per second.
    ProducerByteRate,
    /// Bytes of Fetch responses per second.
    ConsumerByteRate,
    /// Time handling the client's requests, in percent of one thread.
    RequestPercentage,
    /// New connections per second from one IP address.
    ConnectionCreationRate,
}

impl QuotaKind {
    pub(crate) const ALL: [QuotaKind; 4] = [
        QuotaKind::ProducerByteRate,
        QuotaKind::ConsumerByteRate,
        QuotaKind::RequestPercentage,
        QuotaKind::ConnectionCreationRate,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            QuotaKind::ProducerByteRate => "producer_byte_rate",
            QuotaKind::ConsumerByteRate => "consumer_byte_rate",
            QuotaKind::RequestPercentage => "request_percentage",
            QuotaKind::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    /// The kind of a quota key, if it is one an entity of this sort can have (an IP address
    /// only a connection rate, users and client ids the others, as in Kafka).
    pub(crate) fn for_entity(key: &str, entity: &QuotaEntity) -> Result<QuotaKind, EntityError> {
        let kind = QuotaKind::ALL.into_iter().find(|k| k.name() == key);
        match kind {
            Some(QuotaKind::ConnectionCreationRate) if entity.is_ip() => {
                Ok(QuotaKind::ConnectionCreationRate)
            }
            Some(kind) if !entity.is_ip() && kind != QuotaKind::ConnectionCreationRate => Ok(kind),
            Some(kind) => Err(format!("{} cannot be set for {entity}", kind.name())),
            None if key == "controller_mutation_rate" => Err(
                "controller_mutation_rate is not supported: KafScale does not throttle topic \
                 creations and deletions"
                    .into(),
            ),
            None => Err(format!("unknown quota {key:?}")),
        }
    }

    /// Whether `value` is a valid setting: above 0 and, but for request_percentage (Kafka's
    /// double), whole and within Kafka's type (a long for byte rates, an int for connections).
    pub(crate) fn check(self, value: f64) -> Result<(), EntityError> {
        let (whole, bits) = match self {
            QuotaKind::RequestPercentage => (false, 0),
            QuotaKind::ConnectionCreationRate => (true, 31),
            QuotaKind::ProducerByteRate | QuotaKind::ConsumerByteRate => (true, 63),
        };
        let fits = !whole || (value.fract() == 0.0 && value < 2f64.powi(bits));
        if value.is_finite() && value > 0.0 && fits {
            return Ok(());
        }
        let what = match whole {
            true => format!("a whole number above 0 and below 2^{bits}"),
            false => "a number above 0".to_string(),
        };
        Err(format!("{} must be {what}, not {value}", self.name()))
    }
}

/// The quota in force for a client: its bound, the configured entity it comes from, and whose
/// usage it meters (the user and the client id, where the entity names them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Limit {
    pub bound: f64,
    pub entity: QuotaEntity,
    pub metered: (Option<String>, Option<String>),
}

/// Every quota set, by entity: what the metadata store holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct QuotaTable {
    entries: HashMap<QuotaEntity, BTreeMap<String, f64>>,
}

impl QuotaTable {
    pub(crate) fn new(
        entries: impl IntoIterator<Item = (QuotaEntity, BTreeMap<String, f64>)>,
    ) -> QuotaTable {
        QuotaTable {
            entries: entries.into_iter().collect(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every quota set: its entity (as metrics name it) and its kind's name.
    pub(crate) fn configured(&self) -> impl Iterator<Item = (String, &str)> + '_ {
        self.entries.iter().flat_map(|(entity, values)| {
            let entity = entity.to_string();
            values
                .keys()
                .map(move |name| (entity.clone(), name.as_str()))
        })
    }

    fn value(&self, entity: &QuotaEntity, kind: QuotaKind) -> Option<f64> {
        self.entries.get(entity)?.get(kind.name()).copied()
    }

    /// The quota of `kind` for the client `client_id` of `user`, by Kafka's precedence.
    pub(crate) fn client_limit(
        &self,
        kind: QuotaKind,
        user: &str,
        client_id: &str,
    ) -> Option<Limit> {
        let (u, c) = (Name::Named(user.into()), Name::Named(client_id.into()));
        let d = Name::Default;
        let order = [
            (Some(&u), Some(&c)),
            (Some(&u), Some(&d)),
            (Some(&u), None),
            (Some(&d), Some(&c)),
            (Some(&d), Some(&d)),
            (Some(&d), None),
            (None, Some(&c)),
            (None, Some(&d)),
        ];
        for (user_part, client_part) in order {
            let entity = QuotaEntity {
                user: user_part.cloned(),
                client_id: client_part.cloned(),
                ip: None,
            };
            if let Some(bound) = self.value(&entity, kind) {
                let metered = (
                    user_part.map(|_| user.to_string()),
                    client_part.map(|_| client_id.to_string()),
                );
                return Some(Limit {
                    bound,
                    entity,
                    metered,
                });
            }
        }
        None
    }

    /// The connection rate quota of an IP address: its own, else the default.
    pub(crate) fn ip_limit(&self, ip: &str) -> Option<Limit> {
        [Name::Named(ip.into()), Name::Default]
            .into_iter()
            .find_map(|name| {
                let entity = QuotaEntity {
                    ip: Some(name),
                    ..Default::default()
                };
                let bound = self.value(&entity, QuotaKind::ConnectionCreationRate)?;
                Some(Limit {
                    bound,
                    entity,
                    metered: (None, Some(ip.to_string())),
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        QuotaEntity::from_wire(parts.iter().copied()).unwrap()
    }

    /// An entity's (type, name) pairs.
    type Parts<'a> = &'a [(&'a str, Option<&'a str>)];

    fn table(quotas: &[(Parts<'_>, f64)]) -> QuotaTable {
        QuotaTable::new(quotas.iter().map(|(parts, rate)| {
            let values = BTreeMap::from([("producer_byte_rate".to_string(), *rate)]);
            (entity(parts), values)
        }))
    }

    #[test]
    fn the_most_specific_entity_that_sets_the_quota_wins_in_kafkas_order() {
        let all: Vec<(Parts<'_>, f64)> = vec![
            (&[(USER, Some("alice")), (CLIENT_ID, Some("app"))], 1.0),
            (&[(USER, Some("alice")), (CLIENT_ID, None)], 2.0),
            (&[(USER, Some("alice"))], 3.0),
            (&[(USER, None), (CLIENT_ID, Some("app"))], 4.0),
            (&[(USER, None), (CLIENT_ID, None)], 5.0),
            (&[(USER, None)], 6.0),
            (&[(CLIENT_ID, Some("app"))], 7.0),
            (&[(CLIENT_ID, None)], 8.0),
        ];
        // Taking the most specific away each time reveals the next.
        for first in 0..all.len() {
            let t = table(&all[first..]);
            let limit = t
                .client_limit(QuotaKind::ProducerByteRate, "alice", "app")
                .unwrap();
            assert_eq!(limit.bound, all[first].1);
            assert_eq!(limit.entity, entity(all[first].0));
        }
        assert_eq!(
            table(&all).client_limit(QuotaKind::ConsumerByteRate, "alice", "app"),
            None
        );
    }

    #[test]
    fn usage_is_shared_by_the_clients_an_entity_names_alike() {
        let t = table(&[(&[(USER, None)], 10.0), (&[(CLIENT_ID, None)], 20.0)]);
        // a default user quota meters each user on its own, all of its clients together
        let limit = t
            .client_limit(QuotaKind::ProducerByteRate, "bob", "x")
            .unwrap();
        assert_eq!(limit.metered, (Some("bob".into()), None));
        let t = table(&[(&[(CLIENT_ID, None)], 20.0)]);
        let limit = t
            .client_limit(QuotaKind::ProducerByteRate, "bob", "x")
            .unwrap();
        assert_eq!(limit.metered, (None, Some("x".into())));
        assert_eq!(limit.entity.to_string(), "client-id=<default>");
    }

    #[test]
    fn entities_and_quotas_are_checked_as_kafka_does() {
        let refused = |parts: &[(&str, Option<&str>)]| {
            QuotaEntity::from_wire(parts.iter().copied()).unwrap_err()
        };
        assert!(refused(&[]).contains("empty entity"));
        assert!(refused(&[(USER, Some("a")), (USER, Some("b"))]).contains("twice"));
        assert!(refused(&[("group", Some("g"))]).contains("unknown entity type"));
        assert!(
            refused(&[(IP, Some("10.0.0.1")), (USER, Some("a"))]).contains("cannot be combined")
        );
        assert!(refused(&[(IP, Some("nowhere"))]).contains("not an IP address"));
        let ip = entity(&[(IP, Some("10.0.0.1"))]);
        let user = entity(&[(USER, Some("a"))]);
        assert_eq!(
            QuotaKind::for_entity("connection_creation_rate", &ip),
            Ok(QuotaKind::ConnectionCreationRate)
        );
        assert!(QuotaKind::for_entity("producer_byte_rate", &ip).is_err());
        assert!(QuotaKind::for_entity("connection_creation_rate", &user).is_err());
        assert!(QuotaKind::for_entity("controller_mutation_rate", &user)
            .unwrap_err()
            .contains("not supported"));
        assert!(QuotaKind::ProducerByteRate.check(1.5).is_err());
        assert!(QuotaKind::ProducerByteRate.check(0.0).is_err());
        assert!(QuotaKind::RequestPercentage.check(12.5).is_ok());
        assert!(QuotaKind::ProducerByteRate.check(1e19).is_err());
        assert!(QuotaKind::ProducerByteRate.check(9.2e18).is_ok());
        assert!(QuotaKind::ConnectionCreationRate.check(3e9).is_err());
        let v6 = entity(&[(IP, Some("0:0:0:0:0:0:0:1"))]);
        assert_eq!(v6.to_string(), "ip=::1");
        let t = QuotaTable::new([(
            entity(&[(IP, None)]),
            BTreeMap::from([("connection_creation_rate".to_string(), 5.0)]),
        )]);
        assert_eq!(t.ip_limit("10.0.0.2").map(|l| l.bound), Some(5.0));
    }
}
