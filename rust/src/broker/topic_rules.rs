//! Topic names and per-topic settings, as Kafka defines them.

use kafka_protocol::ResponseError;

use crate::error::ApiError;

const MAX_NAME_LEN: usize = 249;
/// Far above what a single broker serves, low enough that one request cannot flood the store.
pub(crate) const MAX_PARTITIONS: i32 = 10_000;

pub(crate) fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |why: &str| {
        Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("topic name '{name}' is invalid: {why}"),
        ))
    };
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name == "." || name == ".." {
        return invalid("'.' and '..' are reserved");
    }
    if name.len() > MAX_NAME_LEN {
        return invalid("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return invalid("use only ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

pub(crate) fn validate_partition_count(partitions: i32) -> Result<(), ApiError> {
    if !(1..=MAX_PARTITIONS).contains(&partitions) {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!(
                "number of partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_topic_name_rules() {
        for good in ["orders", "a.b_c-D9", &"x".repeat(249)] {
            assert!(validate_topic_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "has space",
            "slash/name",
            "ünï",
            &"x".repeat(250),
        ] {
            let err = validate_topic_name(bad).unwrap_err();
            assert_eq!(err.code, ResponseError::InvalidTopicException);
        }
    }

    #[test]
    fn partition_counts() {
        assert!(validate_partition_count(1).is_ok());
        assert!(validate_partition_count(0).is_err());
        assert!(validate_partition_count(MAX_PARTITIONS + 1).is_err());
    }
}
