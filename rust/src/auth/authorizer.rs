//! Kafka's ACL authorizer rules over the ACLs of the metadata store: super users may do
//! anything; otherwise a deny that applies wins, then an allow of the operation or of one
//! that implies it; a resource no ACL names is open only with
//! `allow.everyone.if.no.acl.found`. Each connection keeps the decisions it asked for
//! ([`Access`]), dropped when the ACLs change, so the hot path pays a hash lookup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::acl::{AclBinding, Operation, PatternType, Permission, ResourceType, WILDCARD};
use super::acl::{ANY_PRINCIPAL, CLUSTER_NAME};

/// The principal of a client that did not authenticate.
pub(crate) const ANONYMOUS: &str = "User:ANONYMOUS";

/// How the broker authorizes (Kafka's `authorizer.class.name`, `super.users` and
/// `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default)]
pub(crate) struct AuthorizerSettings {
    /// False: every request is allowed and the ACL APIs answer SECURITY_DISABLED.
    pub(crate) enabled: bool,
    pub(crate) super_users: Vec<String>,
    pub(crate) allow_if_no_acl: bool,
}

/// The ACLs in force, indexed by resource type and pattern.
#[derive(Default)]
struct AclSet {
    literal: HashMap<(ResourceType, String), Vec<AclBinding>>,
    prefixed: HashMap<ResourceType, Vec<AclBinding>>,
}

impl AclSet {
    fn new(acls: Vec<AclBinding>) -> AclSet {
        let mut set = AclSet::default();
        for acl in acls {
            match acl.pattern_type {
                PatternType::Prefixed => {
                    set.prefixed.entry(acl.resource_type).or_default().push(acl)
                }
                _ => {
                    let key = (acl.resource_type, acl.resource_name.clone());
                    set.literal.entry(key).or_default().push(acl);
                }
            }
        }
        set
    }

    /// Every ACL whose pattern covers the resource.
    fn covering<'a>(
        &'a self,
        kind: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> {
        let literal = |n: &str| {
            self.literal
                .get(&(kind, n.to_string()))
                .into_iter()
                .flatten()
        };
        let wildcard = (name != WILDCARD)
            .then(|| literal(WILDCARD))
            .into_iter()
            .flatten();
        let prefixed = self.prefixed.get(&kind).into_iter().flatten();
        literal(name)
            .chain(wildcard)
            .chain(prefixed.filter(move |acl| acl.covers(name)))
    }

    fn of_type(&self, kind: ResourceType) -> impl Iterator<Item = &AclBinding> {
        let literal = self.literal.iter().filter(move |((k, _), _)| *k == kind);
        let prefixed = self.prefixed.get(&kind).into_iter().flatten();
        literal.flat_map(|(_, acls)| acls).chain(prefixed)
    }
}

pub(crate) struct Authorizer {
    settings: AuthorizerSettings,
    acls: RwLock<Arc<AclSet>>,
    /// Bumped with every change of the ACLs: connections drop their cached decisions.
    generation: AtomicU64,
}

impl Authorizer {
    pub(crate) fn new(settings: AuthorizerSettings) -> Authorizer {
        Authorizer {
            settings,
            acls: RwLock::default(),
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Puts `acls` in force (every ACL the metadata store holds now).
    pub(crate) fn replace(&self, acls: Vec<AclBinding>) {
        *self.acls.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(AclSet::new(acls));
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn current(&self) -> Arc<AclSet> {
        self.acls.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn is_super_user(&self, principal: &str) -> bool {
        self.settings.super_users.iter().any(|s| s == principal)
    }

    /// Whether `principal` connecting from `host` may do `operation` on the resource.
    pub(crate) fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if !self.settings.enabled || self.is_super_user(principal) {
            return true;
        }
        let acls = self.current();
        let mut covering = acls.covering(kind, name).peekable();
        if covering.peek().is_none() {
            return self.settings.allow_if_no_acl;
        }
        let mut allowed = false;
        for acl in covering.filter(|acl| applies_to(acl, principal, host)) {
            match acl.permission {
                Permission::Deny
                    if acl.operation == operation || acl.operation == Operation::All =>
                {
                    return false
                }
                Permission::Allow
                    if acl.operation == Operation::All
                        || operation.implied_by().contains(&acl.operation) =>
                {
                    allowed = true
                }
                _ => {}
            }
        }
        allowed
    }

    /// Whether `principal` may do `operation` on some resource of the type (Kafka's
    /// `authorizeByResourceType`, used for an idempotent producer's InitProducerId): an
    /// applying allow whose pattern no applying deny covers.
    pub(crate) fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        kind: ResourceType,
    ) -> bool {
        if !self.settings.enabled || self.is_super_user(principal) {
            return true;
        }
        let acls = self.current();
        let mut of_type = acls.of_type(kind).peekable();
        if of_type.peek().is_none() {
            return self.settings.allow_if_no_acl;
        }
        let applying: Vec<&AclBinding> = of_type
            .filter(|acl| applies_to(acl, principal, host))
            .filter(|acl| acl.operation == operation || acl.operation == Operation::All)
            .collect();
        let denies: Vec<&&AclBinding> = applying
            .iter()
            .filter(|a| a.permission == Permission::Deny)
            .collect();
        applying
            .iter()
            .filter(|a| a.permission == Permission::Allow)
            .any(|allow| !denies.iter().any(|deny| deny.covers(&allow.resource_name)))
    }
}

fn applies_to(acl: &AclBinding, principal: &str, host: &str) -> bool {
    (acl.principal == principal || acl.principal == ANY_PRINCIPAL)
        && (acl.host == host || acl.host == WILDCARD)
}

/// One connection's identity and the decisions it was given while the ACLs stayed the same.
pub(crate) struct Access {
    authorizer: Arc<Authorizer>,
    principal: Arc<str>,
    host: String,
    cache: Mutex<Decisions>,
}

#[derive(Default)]
struct Decisions {
    generation: u64,
    /// By resource name: (type, operation, allowed).
    by_name: HashMap<Box<str>, Vec<(ResourceType, Operation, bool)>>,
}

/// Names a connection keeps decisions for before it starts over (a client naming ever new
/// topics must not grow it without bound).
const CACHED_NAMES: usize = 4096;

impl Access {
    pub(crate) fn new(authorizer: Arc<Authorizer>, principal: Arc<str>, host: String) -> Access {
        Access {
            authorizer,
            principal,
            host,
            cache: Mutex::default(),
        }
    }

    pub(crate) fn principal(&self) -> &str {
        &self.principal
    }

    /// Whether this connection may do `operation` on the resource.
    pub(crate) fn allows(&self, operation: Operation, kind: ResourceType, name: &str) -> bool {
        if !self.authorizer.enabled() {
            return true;
        }
        let generation = self.authorizer.generation.load(Ordering::Acquire);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.generation != generation || cache.by_name.len() >= CACHED_NAMES {
            cache.generation = generation;
            cache.by_name.clear();
        }
        if let Some(known) = cache.by_name.get(name) {
            if let Some(&(_, _, allowed)) =
                known.iter().find(|(k, o, _)| *k == kind && *o == operation)
            {
                return allowed;
            }
        }
        let allowed = self
            .authorizer
            .authorize(&self.principal, &self.host, operation, kind, name);
        let known = cache.by_name.entry(name.into()).or_default();
        known.push((kind, operation, allowed));
        allowed
    }

    pub(crate) fn allows_topic(&self, operation: Operation, topic: &str) -> bool {
        self.allows(operation, ResourceType::Topic, topic)
    }

    pub(crate) fn allows_group(&self, operation: Operation, group: &str) -> bool {
        self.allows(operation, ResourceType::Group, group)
    }

    pub(crate) fn allows_cluster(&self, operation: Operation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether the connection may do `operation` on some resource of the type.
    pub(crate) fn allows_any(&self, operation: Operation, kind: ResourceType) -> bool {
        self.authorizer
            .authorize_any(&self.principal, &self.host, operation, kind)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::acl::tests::acl;
    use super::*;
    use Operation::*;
    use Permission::{Allow, Deny};
    use ResourceType::{Cluster, Group, Topic};

    pub(crate) fn authorizer(acls: Vec<AclBinding>) -> Arc<Authorizer> {
        let authorizer = Authorizer::new(AuthorizerSettings {
            enabled: true,
            super_users: vec!["User:admin".into()],
            allow_if_no_acl: false,
        });
        authorizer.replace(acls);
        Arc::new(authorizer)
    }

    fn access(authorizer: &Arc<Authorizer>, principal: &str) -> Access {
        Access::new(authorizer.clone(), principal.into(), "10.0.0.1".into())
    }

    #[test]
    fn deny_wins_and_implied_operations_allow_describe() {
        let a = authorizer(vec![
            acl(
                Topic,
                "orders",
                PatternType::Literal,
                "User:alice",
                Read,
                Allow,
            ),
            acl(
                Topic,
                "ord",
                PatternType::Prefixed,
                "User:alice",
                Write,
                Allow,
            ),
            acl(
                Topic,
                "orders",
                PatternType::Literal,
                "User:alice",
                Write,
                Deny,
            ),
            acl(
                Topic,
                "*",
                PatternType::Literal,
                "User:*",
                AlterConfigs,
                Allow,
            ),
        ]);
        let alice = access(&a, "User:alice");
        assert!(alice.allows_topic(Read, "orders"));
        assert!(
            !alice.allows_topic(Write, "orders"),
            "deny wins over the prefixed allow"
        );
        assert!(alice.allows_topic(Write, "ordinal"));
        assert!(alice.allows_topic(Describe, "orders"), "implied by Read");
        assert!(
            alice.allows_topic(DescribeConfigs, "other"),
            "implied by AlterConfigs"
        );
        assert!(!alice.allows_topic(Delete, "orders"));
        let bob = access(&a, "User:bob");
        assert!(!bob.allows_topic(Read, "orders"));
        assert!(
            bob.allows_topic(AlterConfigs, "orders"),
            "User:* applies to everyone"
        );
    }

    #[test]
    fn a_resource_without_acls_follows_the_setting_and_super_users_pass() {
        let a = authorizer(vec![acl(
            Group,
            "g",
            PatternType::Literal,
            "User:alice",
            Read,
            Allow,
        )]);
        let alice = access(&a, "User:alice");
        assert!(!alice.allows_topic(Read, "no-acls-here"));
        assert!(!alice.allows_cluster(Create));
        assert!(access(&a, "User:admin").allows_topic(Delete, "anything"));
        let open = Authorizer::new(AuthorizerSettings {
            enabled: true,
            super_users: vec![],
            allow_if_no_acl: true,
        });
        let open = Arc::new(open);
        assert!(access(&open, "User:x").allows_topic(Read, "no-acls-here"));
        let off = Arc::new(Authorizer::new(AuthorizerSettings::default()));
        assert!(access(&off, ANONYMOUS).allows_cluster(Alter));
    }

    #[test]
    fn hosts_must_match_unless_the_acl_says_any() {
        let mut from_host = acl(Topic, "t", PatternType::Literal, "User:a", Read, Allow);
        from_host.host = "10.0.0.2".into();
        let a = authorizer(vec![from_host]);
        assert!(!access(&a, "User:a").allows_topic(Read, "t"));
        let there = Access::new(a.clone(), "User:a".into(), "10.0.0.2".into());
        assert!(there.allows_topic(Read, "t"));
    }

    #[test]
    fn cached_decisions_follow_a_change_of_the_acls() {
        let a = authorizer(vec![]);
        let alice = access(&a, "User:alice");
        assert!(!alice.allows_topic(Read, "t"));
        a.replace(vec![acl(
            Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            All,
            Allow,
        )]);
        assert!(alice.allows_topic(Read, "t"));
        a.replace(vec![]);
        assert!(!alice.allows_topic(Read, "t"));
    }

    #[test]
    fn any_topic_write_is_an_allow_no_deny_covers() {
        use PatternType::{Literal, Prefixed};
        let writes =
            |name, pattern, permission| acl(Topic, name, pattern, "User:p", Write, permission);
        let logs = || writes("logs-", Prefixed, Allow);
        let a = authorizer(vec![logs(), writes("logs-secret", Literal, Deny)]);
        assert!(access(&a, "User:p").allows_any(Write, Topic));
        assert!(!access(&a, "User:q").allows_any(Write, Topic));
        let denied = authorizer(vec![logs(), writes("*", Literal, Deny)]);
        assert!(!access(&denied, "User:p").allows_any(Write, Topic));
        assert!(!access(&denied, "User:p").allows_any(Write, Cluster));
    }
}
