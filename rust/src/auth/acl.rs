//! Kafka's access control entries as the ACL APIs carry them (KIP-140, prefixed patterns from
//! KIP-290): resource types, pattern types, operations and permissions by their wire codes,
//! a binding (pattern + entry), the filters of DescribeAcls and DeleteAcls, and the checks
//! CreateAcls applies to a new binding.

use serde::{Deserialize, Serialize};

/// The name of the one cluster resource (`kafka-cluster`, as Kafka names it).
pub(crate) const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal name that matches every resource of its type; as a principal or host, any.
pub(crate) const WILDCARD: &str = "*";
pub(crate) const ANY_PRINCIPAL: &str = "User:*";

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub(crate) enum $name {
            $($variant = $code,)*
        }

        impl $name {
            /// The value of a wire code; None for a code Kafka does not define.
            pub(crate) fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            pub(crate) fn code(self) -> i8 {
                self as i8
            }
        }
    };
}

wire_enum!(
    /// What an ACL protects.
    ResourceType {
        Any = 1,
        Topic = 2,
        Group = 3,
        Cluster = 4,
        TransactionalId = 5,
        DelegationToken = 6,
        User = 7,
    }
);

wire_enum!(
    /// How an ACL's resource name is matched. Any and Match appear in filters only.
    PatternType {
        Any = 1,
        Match = 2,
        Literal = 3,
        Prefixed = 4,
    }
);

wire_enum!(
    /// What a principal does to a resource.
    Operation {
        Any = 1,
        All = 2,
        Read = 3,
        Write = 4,
        Create = 5,
        Delete = 6,
        Alter = 7,
        Describe = 8,
        ClusterAction = 9,
        DescribeConfigs = 10,
        AlterConfigs = 11,
        IdempotentWrite = 12,
        CreateTokens = 13,
        DescribeTokens = 14,
    }
);

wire_enum!(
    /// Whether an entry allows or denies.
    Permission {
        Any = 1,
        Deny = 2,
        Allow = 3,
    }
);

impl Operation {
    /// The operations whose allowance implies this one (Kafka: Describe is implied by Read,
    /// Write, Delete and Alter; DescribeConfigs by AlterConfigs). A deny is never implied.
    pub(crate) fn implied_by(self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Describe => &[Describe, Read, Write, Delete, Alter],
            DescribeConfigs => &[DescribeConfigs, AlterConfigs],
            Read => &[Read],
            Write => &[Write],
            Create => &[Create],
            Delete => &[Delete],
            Alter => &[Alter],
            ClusterAction => &[ClusterAction],
            AlterConfigs => &[AlterConfigs],
            IdempotentWrite => &[IdempotentWrite],
            CreateTokens => &[CreateTokens],
            DescribeTokens => &[DescribeTokens],
            Any | All => &[],
        }
    }
}

/// One ACL: who may or may not do what to which resources, from which host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct AclBinding {
    pub(crate) resource_type: ResourceType,
    pub(crate) resource_name: String,
    pub(crate) pattern_type: PatternType,
    pub(crate) principal: String,
    pub(crate) host: String,
    pub(crate) operation: Operation,
    pub(crate) permission: Permission,
}

impl AclBinding {
    /// Why CreateAcls refuses this binding (Kafka answers INVALID_REQUEST with the reason).
    pub(crate) fn problem(&self) -> Option<String> {
        if matches!(self.resource_type, ResourceType::Any) {
            return Some("the resource type must be a concrete type, not ANY".into());
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return Some("the pattern type must be LITERAL or PREFIXED".into());
        }
        if matches!(self.operation, Operation::Any) {
            return Some("the operation must be a concrete operation, not ANY".into());
        }
        if matches!(self.permission, Permission::Any) {
            return Some("the permission type must be ALLOW or DENY".into());
        }
        if self.resource_name.is_empty() {
            return Some("the resource name must not be empty".into());
        }
        if self.pattern_type == PatternType::Prefixed && self.resource_name == WILDCARD {
            return Some("'*' is a literal pattern: a PREFIXED '*' matches nothing".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Some(format!("the cluster resource is named '{CLUSTER_NAME}'"));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Some(format!(
                    "'{}' is not a principal: write TYPE:NAME, e.g. User:alice",
                    self.principal
                ))
            }
        }
        if self.host.is_empty() {
            return Some("the host must be an IP address or '*'".into());
        }
        None
    }

    /// Whether this binding's pattern covers `name` (a resource of its type).
    pub(crate) fn covers(&self, name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => self.resource_name == name || self.resource_name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.resource_name),
            PatternType::Any | PatternType::Match => false,
        }
    }
}

/// A filter of DescribeAcls and DeleteAcls: None and the ANY codes match everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AclFilter {
    pub(crate) resource_type: ResourceType,
    pub(crate) resource_name: Option<String>,
    pub(crate) pattern_type: PatternType,
    pub(crate) principal: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) operation: Operation,
    pub(crate) permission: Permission,
}

impl AclFilter {
    pub(crate) fn matches(&self, acl: &AclBinding) -> bool {
        let resource_type =
            self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type;
        let text =
            |filter: &Option<String>, value: &str| filter.as_deref().is_none_or(|f| f == value);
        let operation = self.operation == Operation::Any || self.operation == acl.operation;
        let permission = self.permission == Permission::Any || self.permission == acl.permission;
        resource_type
            && self.matches_pattern(acl)
            && text(&self.principal, &acl.principal)
            && text(&self.host, &acl.host)
            && operation
            && permission
    }

    /// Kafka's pattern filter rules: ANY takes every pattern with the given name (or any
    /// name); MATCH takes the patterns that would apply to a resource of that name (the
    /// literal one, the wildcard, prefixes of it); LITERAL and PREFIXED take their own.
    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        let Some(name) = self.resource_name.as_deref() else {
            return match self.pattern_type {
                PatternType::Any | PatternType::Match => true,
                own => own == acl.pattern_type,
            };
        };
        match self.pattern_type {
            PatternType::Any => acl.resource_name == name,
            PatternType::Match => acl.covers(name),
            own => own == acl.pattern_type && acl.resource_name == name,
        }
    }

    /// Why the filter cannot be used (INVALID_REQUEST): an unknown code was sent.
    pub(crate) fn problem(&self) -> Option<String> {
        (self.pattern_type == PatternType::Match && self.resource_name.is_none())
            .then(|| "a MATCH pattern filter needs a resource name".into())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: WILDCARD.into(),
            operation,
            permission,
        }
    }

    fn topic_acl(name: &str, pattern: PatternType) -> AclBinding {
        use Operation::Read;
        acl(
            ResourceType::Topic,
            name,
            pattern,
            "User:a",
            Read,
            Permission::Allow,
        )
    }

    fn filter(name: Option<&str>, pattern_type: PatternType) -> AclFilter {
        AclFilter {
            resource_type: ResourceType::Any,
            resource_name: name.map(Into::into),
            pattern_type,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        }
    }

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for code in 1..=7 {
            assert_eq!(ResourceType::from_code(code).unwrap().code(), code);
        }
        assert_eq!(ResourceType::from_code(0), None);
        assert_eq!(Operation::from_code(14), Some(Operation::DescribeTokens));
        assert_eq!(Operation::from_code(15), None);
        assert_eq!(PatternType::from_code(4), Some(PatternType::Prefixed));
        assert_eq!(Permission::from_code(3), Some(Permission::Allow));
    }

    #[test]
    fn literal_wildcard_and_prefixed_patterns_cover_names() {
        assert!(topic_acl("orders", PatternType::Literal).covers("orders"));
        assert!(!topic_acl("orders", PatternType::Literal).covers("orders-eu"));
        assert!(topic_acl("*", PatternType::Literal).covers("anything"));
        assert!(topic_acl("ord", PatternType::Prefixed).covers("orders"));
        assert!(!topic_acl("ord", PatternType::Prefixed).covers("or"));
        assert!(!topic_acl("*", PatternType::Prefixed).covers("anything"));
    }

    #[test]
    fn filters_follow_kafkas_pattern_rules() {
        let literal = topic_acl("orders", PatternType::Literal);
        let wildcard = topic_acl("*", PatternType::Literal);
        let prefixed = topic_acl("ord", PatternType::Prefixed);
        let all = [&literal, &wildcard, &prefixed];
        let taken = |f: AclFilter| all.iter().filter(|a| f.matches(a)).count();
        assert_eq!(taken(filter(None, PatternType::Any)), 3);
        assert_eq!(taken(filter(None, PatternType::Prefixed)), 1);
        assert_eq!(taken(filter(Some("orders"), PatternType::Any)), 1);
        assert_eq!(taken(filter(Some("orders"), PatternType::Match)), 3);
        assert_eq!(taken(filter(Some("other"), PatternType::Match)), 1);
        assert_eq!(taken(filter(Some("ord"), PatternType::Literal)), 0);
        assert_eq!(taken(filter(Some("ord"), PatternType::Prefixed)), 1);
        let mut by_principal = filter(None, PatternType::Any);
        by_principal.principal = Some("User:b".into());
        assert_eq!(taken(by_principal), 0);
        let mut by_operation = filter(None, PatternType::Any);
        by_operation.operation = Operation::Write;
        assert_eq!(taken(by_operation), 0);
        assert!(filter(None, PatternType::Match).problem().is_some());
    }

    #[test]
    fn bindings_kafka_refuses_are_refused_with_a_reason() {
        let good = topic_acl("orders", PatternType::Literal);
        assert_eq!(good.problem(), None);
        let with = |change: fn(&mut AclBinding)| {
            let mut bad = good.clone();
            change(&mut bad);
            bad.problem().expect("refused")
        };
        assert!(with(|a| a.resource_type = ResourceType::Any).contains("resource type"));
        assert!(with(|a| a.pattern_type = PatternType::Match).contains("pattern type"));
        assert!(with(|a| a.operation = Operation::Any).contains("operation"));
        assert!(with(|a| a.permission = Permission::Any).contains("permission"));
        assert!(with(|a| a.principal = "alice".into()).contains("TYPE:NAME"));
        assert!(with(|a| a.resource_name = String::new()).contains("empty"));
        assert!(with(|a| {
            a.resource_name = "*".into();
            a.pattern_type = PatternType::Prefixed;
        })
        .contains("PREFIXED"));
        assert!(with(|a| a.resource_type = ResourceType::Cluster).contains("kafka-cluster"));
    }
}
