//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them: the server side
//! of the exchange, and the credential a password becomes (salt, iterations, StoredKey,
//! ServerKey: never the password).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};
use serde::{Deserialize, Serialize};

/// Kafka's bounds for iterations (AlterUserScramCredentials refuses others).
pub(crate) const MIN_ITERATIONS: u32 = 4096;
pub(crate) const MAX_ITERATIONS: u32 = 16384;
/// The longest salt AlterUserScramCredentials takes. Kafka sets none; a salt is sent to every
/// client that logs in as the user and hashed at every login, and RFC 5802's are some 16-32
/// bytes, so this leaves room for any real one.
pub(crate) const MAX_SALT_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ScramMechanism {
    Sha256,
    Sha512,
}

impl ScramMechanism {
    pub(crate) const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    pub(crate) fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's code in the SCRAM admin APIs (KIP-554).
    pub(crate) fn code(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    pub(crate) fn from_code(code: i8) -> Option<ScramMechanism> {
        ScramMechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// The length of its hash, and so of a salted password (32 or 64 bytes).
    pub(crate) fn output_len(self) -> usize {
        self.digest().output_len()
    }

    fn mac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac(), key), data)
            .as_ref()
            .to_vec()
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest(), data).as_ref().to_vec()
    }

    /// Hi(password, salt, i) of RFC 5802.
    pub(crate) fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0; self.output_len()];
        let rounds = std::num::NonZeroU32::new(iterations.max(1)).expect("at least 1");
        pbkdf2::derive(self.pbkdf2(), rounds, salt, password, &mut out);
        out
    }
}

/// What the server keeps of a SCRAM password.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScramCredential {
    #[serde(with = "base64_bytes")]
    pub(crate) salt: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub(crate) stored_key: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub(crate) server_key: Vec<u8>,
    pub(crate) iterations: u32,
}

impl ScramCredential {
    /// From the salted password a client computed (AlterUserScramCredentials sends that).
    pub(crate) fn from_salted(
        mechanism: ScramMechanism,
        salted: &[u8],
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let client_key = mechanism.mac(salted, b"Client Key");
        ScramCredential {
            salt,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.mac(salted, b"Server Key"),
            iterations,
        }
    }

    /// PBKDF2 of the password: milliseconds of CPU, so logins call it through
    /// `PasswordHashing`, off the async workers.
    pub(crate) fn from_password(
        mechanism: ScramMechanism,
        password: &str,
        salt: Vec<u8>,
        iterations: u32,
    ) -> ScramCredential {
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted(mechanism, &salted, salt, iterations)
    }
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::BASE64.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        super::BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Equal in time that depends only on the lengths.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Why an exchange failed; the client is told only that authentication failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ScramError(pub(crate) String);

/// The client's first message, parsed: who, and its nonce.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientFirst {
    pub(crate) user: String,
    nonce: String,
    /// The message without its GS2 header: part of what both sides sign.
    bare: String,
}

impl ClientFirst {
    pub(crate) fn parse(message: &[u8]) -> Result<ClientFirst, ScramError> {
        let text = std::str::from_utf8(message)
            .map_err(|_| ScramError("the first message is not UTF-8".into()))?;
        // gs2-header: "n," or "y," (no channel binding; "p=" would need one), an optional
        // authzid, then ","
        let (flag, rest) = text
            .split_once(',')
            .ok_or_else(|| ScramError("the first message has no GS2 header".into()))?;
        if flag != "n" && flag != "y" {
            return Err(ScramError(format!(
                "channel binding {flag:?} is not supported"
            )));
        }
        let (authzid, bare) = rest
            .split_once(',')
            .ok_or_else(|| ScramError("the first message has no GS2 header".into()))?;
        let mut user = None;
        let mut nonce = None;
        for attr in bare.split(',') {
            match attr.split_once('=') {
                Some(("n", name)) => user = Some(sasl_name(name)?),
                Some(("r", value)) => nonce = Some(value.to_string()),
                Some(("m", _)) => {
                    return Err(ScramError("mandatory extensions are not supported".into()))
                }
                // Kafka's extensions (tokenauth=true is for delegation tokens, not served)
                Some(("tokenauth", "true")) => {
                    return Err(ScramError("delegation tokens are not supported".into()))
                }
                _ => {}
            }
        }
        let user = user.ok_or_else(|| ScramError("the first message names no user".into()))?;
        if let Some(authzid) = authzid.strip_prefix("a=") {
            if sasl_name(authzid)? != user {
                return Err(ScramError("an authorization id other than the user".into()));
            }
        }
        Ok(ClientFirst {
            user,
            nonce: nonce.ok_or_else(|| ScramError("the first message has no nonce".into()))?,
            bare: bare.to_string(),
        })
    }
}

/// RFC 5802's saslname: "=2C" is ',' and "=3D" is '='.
fn sasl_name(text: &str) -> Result<String, ScramError> {
    let decoded = text.replace("=2C", ",").replace("=3D", "=");
    if decoded.is_empty() || text.replace("=2C", "").replace("=3D", "").contains('=') {
        return Err(ScramError(format!("{text:?} is not a SCRAM user name")));
    }
    Ok(decoded)
}

/// The server between its first message and the client's final one.
pub(crate) struct ServerFirst {
    mechanism: ScramMechanism,
    credential: ScramCredential,
    nonce: String,
    /// client-first-bare "," server-first
    signed_so_far: String,
    pub(crate) message: String,
}

impl ServerFirst {
    /// `server_nonce`: random printable characters (no ',').
    pub(crate) fn new(
        mechanism: ScramMechanism,
        first: &ClientFirst,
        credential: ScramCredential,
        server_nonce: &str,
    ) -> ServerFirst {
        let nonce = format!("{}{server_nonce}", first.nonce);
        let message = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        ServerFirst {
            mechanism,
            signed_so_far: format!("{},{message}", first.bare),
            credential,
            nonce,
            message,
        }
    }

    /// Checks the client's proof; the server's final message if it holds.
    pub(crate) fn finish(&self, message: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(message)
            .map_err(|_| ScramError("the final message is not UTF-8".into()))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError("the final message has no proof".into()))?;
        let mut nonce = None;
        let mut binding = None;
        for attr in without_proof.split(',') {
            match attr.split_once('=') {
                Some(("r", value)) => nonce = Some(value),
                Some(("c", value)) => binding = Some(value),
                _ => {}
            }
        }
        // "n,," or "y,," base64-encoded: no channel binding data.
        if !matches!(binding, Some("biws") | Some("eSws")) {
            return Err(ScramError(
                "unexpected channel binding in the final message".into(),
            ));
        }
        // Ends with, as Kafka checks it: librdkafka 2.0 sends the client's part twice.
        if !nonce.is_some_and(|n| n.ends_with(self.nonce.as_str())) {
            return Err(ScramError(
                "the final message's nonce is not this exchange's".into(),
            ));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError("the proof is not base64".into()))?;
        let auth_message = format!("{},{without_proof}", self.signed_so_far);
        let m = self.mechanism;
        let client_signature = m.mac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError("invalid credentials".into()));
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        if !same(&m.hash(&client_key), &self.credential.stored_key) {
            return Err(ScramError("invalid credentials".into()));
        }
        let server_signature = m.mac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange (SCRAM-SHA-256, user "user", password "pencil").
    #[test]
    fn the_rfc_7677_exchange() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha256, "pencil", salt, 4096);
        let first = ClientFirst::parse(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(first.user, "user");
        let server = ServerFirst::new(
            ScramMechanism::Sha256,
            &first,
            credential.clone(),
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            server.message,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                    p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            server.finish(last.as_bytes()),
            Ok("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_string())
        );
        let forged = last.replace("p=dHzb", "p=dHzc");
        assert!(server.finish(forged.as_bytes()).is_err());
        let other_nonce = last.replace("k0,", "k1,");
        assert!(server.finish(other_nonce.as_bytes()).is_err());
        // librdkafka 2.0 repeats the client nonce; Kafka accepts a nonce that ends right
        let repeated = last.replace(
            "r=rOprNGfwEbeRWgbNEkqO",
            "r=rOprNGfwEbeRWgbNEkqOrOprNGfwEbeRWgbNEkqO",
        );
        let proof_covers_it = server.finish(repeated.as_bytes());
        assert_eq!(
            proof_covers_it,
            Err(ScramError("invalid credentials".into())),
            "the proof signs the nonce as sent"
        );
    }

    #[test]
    fn first_messages_kafka_clients_do_not_send_are_refused() {
        for bad in [
            &b"p=tls-unique,,n=user,r=abc"[..],
            b"n,,r=abc",
            b"n,,n=user",
            b"n,a=admin,n=user,r=abc",
            b"n,,n=user,r=abc,tokenauth=true",
            b"n,,n=us=er,r=abc",
            b"\xff\xfe",
        ] {
            assert!(
                ClientFirst::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let escaped = ClientFirst::parse(b"n,a=a=2Cb,n=a=2Cb,r=abc").unwrap();
        assert_eq!(escaped.user, "a,b");
    }

    #[test]
    fn a_credential_stores_no_password_and_reads_back() {
        let credential =
            ScramCredential::from_password(ScramMechanism::Sha512, "secret", vec![7; 16], 8192);
        let json = serde_json::to_string(&credential).unwrap();
        assert!(!json.contains("secret"));
        assert_eq!(
            serde_json::from_str::<ScramCredential>(&json).unwrap(),
            credential
        );
        assert_eq!(credential.stored_key.len(), 64);
    }
}
