//! Where a login's credentials come from: the users file (`--sasl-users-file`, `name:password`
//! lines read at every login, so an edit applies at once) and the SCRAM credentials in the
//! metadata store (`{root}/scram/{MECHANISM}/{user}`, written by AlterUserScramCredentials and
//! read by every broker at each login).

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;

use super::hashing::PasswordHashing;
use super::scram::{same, ScramCredential, ScramMechanism, MIN_ITERATIONS};
use crate::meta::catalog::{key_segment, segment_name, Catalog};
use crate::meta::kv::{MetaError, Op};

/// Why a credential could not be looked up (not: that there is none).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("metadata store: {0}")]
    Meta(#[from] MetaError),
    #[error("users file {0}: {1}")]
    File(String, std::io::Error),
    #[error("stored SCRAM credential of {0} is unreadable: {1}")]
    Corrupt(String, serde_json::Error),
}

/// The password the users file gives `user`, if it names it.
pub(crate) fn file_password(path: &Path, user: &str) -> Result<Option<String>, LookupError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LookupError::File(path.display().to_string(), e))?;
    Ok(text
        .lines()
        .map(str::trim_start)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| *name == user)
        .map(|(_, password)| password.trim_end_matches(['\r', '\n']).to_string()))
}

fn key(catalog: &Catalog, mechanism: ScramMechanism, user: &str) -> String {
    format!("{}{}", prefix(catalog, mechanism), key_segment(user))
}

fn prefix(catalog: &Catalog, mechanism: ScramMechanism) -> String {
    format!("{}/scram/{}/", catalog.root(), mechanism.name())
}

pub(crate) async fn stored(
    catalog: &Catalog,
    mechanism: ScramMechanism,
    user: &str,
) -> Result<Option<ScramCredential>, LookupError> {
    let Some(kv) = catalog.kv().get(&key(catalog, mechanism, user)).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&kv.value)
        .map(Some)
        .map_err(|e| LookupError::Corrupt(user.to_string(), e))
}

/// The SCRAM credential to check `user` against: the stored one, else one made from the users
/// file's password with a fresh salt (the client derives its key from whatever salt it is
/// sent, so a file user needs nothing stored).
pub(crate) async fn scram_credential(
    catalog: &Catalog,
    users_file: Option<&Path>,
    hashing: &PasswordHashing,
    mechanism: ScramMechanism,
    user: &str,
) -> Result<Option<ScramCredential>, LookupError> {
    if let Some(credential) = stored(catalog, mechanism, user).await? {
        return Ok(Some(credential));
    }
    let Some(password) = users_file
        .map(|f| file_password(f, user))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    let salt = super::random_bytes(24);
    Ok(Some(
        hashing
            .credential(mechanism, &password, salt, MIN_ITERATIONS)
            .await,
    ))
}

/// Whether `password` is `user`'s (SASL/PLAIN): the users file's, or any stored SCRAM
/// credential's.
pub(crate) async fn password_matches(
    catalog: &Catalog,
    users_file: Option<&Path>,
    hashing: &PasswordHashing,
    user: &str,
    password: &str,
) -> Result<bool, LookupError> {
    if let Some(expected) = users_file
        .map(|f| file_password(f, user))
        .transpose()?
        .flatten()
    {
        return Ok(same(expected.as_bytes(), password.as_bytes()));
    }
    for mechanism in ScramMechanism::ALL {
        if let Some(credential) = stored(catalog, mechanism, user).await? {
            return Ok(hashing.matches(&credential, mechanism, password).await);
        }
    }
    Ok(false)
}

/// Every stored credential: user → (mechanism, iterations), users in name order.
pub(crate) async fn described(
    catalog: &Catalog,
) -> Result<BTreeMap<String, Vec<(ScramMechanism, u32)>>, LookupError> {
    let mut users: BTreeMap<String, Vec<(ScramMechanism, u32)>> = BTreeMap::new();
    for mechanism in ScramMechanism::ALL {
        let prefix = prefix(catalog, mechanism);
        for kv in catalog.kv().range(&prefix).await?.kvs {
            let user = segment_name(kv.key.strip_prefix(&prefix).unwrap_or(&kv.key));
            let credential: ScramCredential = serde_json::from_slice(&kv.value)
                .map_err(|e| LookupError::Corrupt(user.clone(), e))?;
            users
                .entry(user)
                .or_default()
                .push((mechanism, credential.iterations));
        }
    }
    Ok(users)
}

/// Writes and deletes credentials in one transaction.
pub(crate) async fn alter(
    catalog: &Catalog,
    upserts: Vec<(String, ScramMechanism, ScramCredential)>,
    deletes: Vec<(String, ScramMechanism)>,
) -> Result<(), LookupError> {
    let mut ops: Vec<Op> = deletes
        .iter()
        .map(|(user, m)| Op::Delete(key(catalog, *m, user)))
        .collect();
    for (user, mechanism, credential) in &upserts {
        let value = serde_json::to_vec(credential).expect("a credential serializes");
        ops.push(Op::Put(key(catalog, *mechanism, user), Bytes::from(value)));
    }
    catalog.kv().txn(vec![], ops).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_file_names_users_once_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("users");
        std::fs::write(
            &path,
            "# admins\nadmin:s3cret:with:colons\n  alice:pw\n\nbob\n",
        )
        .unwrap();
        assert_eq!(
            file_password(&path, "admin").unwrap().as_deref(),
            Some("s3cret:with:colons")
        );
        assert_eq!(
            file_password(&path, "alice").unwrap().as_deref(),
            Some("pw")
        );
        assert_eq!(file_password(&path, "bob").unwrap(), None);
        assert!(file_password(&dir.path().join("missing"), "admin").is_err());
    }

    #[test]
    fn user_names_are_one_key_segment() {
        for name in ["alice", "a/b", "100%", "%2F"] {
            assert_eq!(segment_name(&key_segment(name)), name);
            assert!(!key_segment(name).contains('/'));
        }
    }
}
