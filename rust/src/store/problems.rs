//! What went wrong opening or probing object storage, in one line a person can act on: the
//! S3 error's code and message instead of its XML body, and which credentials are missing
//! before any request would fall back to the instance metadata service.

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

/// Why a store could not be opened; callers name the setting at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("directory {}: {error}", dir.display())]
    Directory {
        dir: std::path::PathBuf,
        error: String,
    },
    #[error(
        "no S3 credentials found for the endpoint {endpoint}: set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), or \
         AWS_SKIP_SIGNATURE=true if the bucket allows anonymous access"
    )]
    NoCredentials { endpoint: String },
    #[error("bucket {bucket}: {message}")]
    S3 { bucket: String, message: String },
}

/// Why object storage answered a start-up probe with an error, from what S3 said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// 404 on the bucket itself.
    NoBucket,
    /// 403: the credentials are unknown, wrong, or not allowed to list the bucket
    /// (S3's error code and message).
    Denied(String),
    /// The bucket is in another region (a redirect, or a request signed for the wrong one).
    WrongRegion(String),
    /// No connection: refused, no route, unknown host.
    Unreachable(String),
    /// Connected, but no answer in time.
    NoAnswer,
    /// Credentials could not be found or fetched (no endpoint: the standard AWS chain).
    NoCredentials(String),
    Other(String),
}

impl Unusable {
    pub(super) fn classify(e: &object_store::Error) -> Unusable {
        let text = e.to_string();
        let has = |needle: &str| text.contains(needle);
        let code = xml_field(&text, "Code");
        let s3_said = || match (xml_field(&text, "Code"), xml_field(&text, "Message")) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code,
            _ => status_of(&text).unwrap_or_else(|| one_line(&text)),
        };
        // Fetching credentials failed (the standard AWS chain without an endpoint): its own
        // HTTP status, if any, is not the bucket's.
        let fetching_credentials = text.to_ascii_lowercase().contains("credentials")
            || has("/latest/api/token")
            || has("/latest/meta-data/")
            || has("169.254.170.2")
            || has("AssumeRoleWithWebIdentity");
        if code.is_none() && fetching_credentials {
            return Unusable::NoCredentials(status_of(&text).unwrap_or_else(|| root_cause(e)));
        }
        if code.as_deref() == Some("NoSuchBucket") || (has("404 Not Found") && code.is_none()) {
            Unusable::NoBucket
        } else if has("301 Moved Permanently")
            || matches!(
                code.as_deref(),
                Some(
                    "PermanentRedirect"
                        | "AuthorizationHeaderMalformed"
                        | "IllegalLocationConstraintException"
                )
            )
        {
            Unusable::WrongRegion(s3_said())
        } else if has("403 Forbidden")
            || has("401 Unauthorized")
            || matches!(
                code.as_deref(),
                Some(
                    "InvalidAccessKeyId"
                        | "SignatureDoesNotMatch"
                        | "AccessDenied"
                        | "ExpiredToken"
                        | "InvalidToken"
                )
            )
        {
            Unusable::Denied(s3_said())
        } else if has("error sending request") || has("HTTP error") {
            Unusable::Unreachable(root_cause(e))
        } else if has("timed out") || has("operation timed out") {
            Unusable::NoAnswer
        } else {
            Unusable::Other(s3_said())
        }
    }
}

/// The text of `<name>...</name>` in an S3 error body, CDATA unwrapped.
fn xml_field(text: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{name}>"))?;
    let value = text[start..end].trim();
    let value = value
        .strip_prefix("<![CDATA[")
        .and_then(|v| v.strip_suffix("]]>"))
        .unwrap_or(value);
    Some(value.trim().to_string())
}

/// "404 Not Found" out of object_store's "Server returned non-2xx status code: ..." text.
fn status_of(text: &str) -> Option<String> {
    let marker = "status code: ";
    let start = text.find(marker)? + marker.len();
    let rest = &text[start..];
    let end = rest.find(':').unwrap_or(rest.len());
    Some(rest[..end].trim().to_string())
}

/// The innermost error's message (`connection refused`, `dns error: ...`).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = one_line(&cause.to_string());
    // io::Error says "Connection refused (os error 111)": the number tells people nothing.
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// One line for an object_store error: its first line, with what an S3 error body says
/// (code and message) in place of the XML.
pub(crate) fn concise(text: &str) -> String {
    let line = one_line(text);
    match (xml_field(text, "Code"), xml_field(text, "Message")) {
        (Some(code), Some(message)) => format!("{line} ({code}: {message})"),
        (Some(code), None) => format!("{line} ({code})"),
        _ => line,
    }
}

/// The first line of a message, without a response body appended to it.
pub(crate) fn one_line(text: &str) -> String {
    let text = text.split("<?xml").next().unwrap_or(text);
    let line = text.lines().next().unwrap_or("").trim();
    line.trim_end_matches(':').trim().to_string()
}

/// Whether credentials for S3 are configured where object_store looks before the instance
/// metadata service: keys (given or in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), web
/// identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), a container's credentials
/// endpoint (ECS, EKS Pod Identity), or unsigned requests asked for (AWS_SKIP_SIGNATURE).
pub(crate) fn has_configured_credentials(builder: &AmazonS3Builder) -> bool {
    let set = |key: AmazonS3ConfigKey| {
        builder
            .get_config_value(&key)
            .is_some_and(|v| !v.is_empty())
    };
    let env = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty());
    (set(AmazonS3ConfigKey::AccessKeyId) || set(AmazonS3ConfigKey::SecretAccessKey))
        || (env("AWS_WEB_IDENTITY_TOKEN_FILE") && env("AWS_ROLE_ARN"))
        || set(AmazonS3ConfigKey::ContainerCredentialsRelativeUri)
        || set(AmazonS3ConfigKey::ContainerCredentialsFullUri)
        || builder
            .get_config_value(&AmazonS3ConfigKey::SkipSignature)
            .is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn s3_error(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    #[test]
    fn start_up_probe_failures_are_classified_from_what_s3_said() {
        let listing = "Error performing list request: Error performing GET \
             http://127.0.0.1:5055/b?list-type=2 in 10ms - Server returned non-2xx status code";
        let body = |status: &str, code: &str, message: &str| {
            s3_error(&format!(
                "{listing}: {status}: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n \
                 <Code>{code}</Code>\n <Message><![CDATA[{message}]]></Message>\n</Error>"
            ))
        };
        let missing = body(
            "404 Not Found",
            "NoSuchBucket",
            "The specified bucket does not exist",
        );
        assert_eq!(Unusable::classify(&missing), Unusable::NoBucket);
        let denied = body("403 Forbidden", "InvalidAccessKeyId", "No such key.");
        assert_eq!(
            Unusable::classify(&denied),
            Unusable::Denied("InvalidAccessKeyId: No such key.".into())
        );
        let region = body(
            "400 Bad Request",
            "AuthorizationHeaderMalformed",
            "Wrong region",
        );
        assert!(matches!(
            Unusable::classify(&region),
            Unusable::WrongRegion(_)
        ));
        // the metadata service answering 404 is no missing bucket
        let imds = s3_error(
            "Error performing PUT http://169.254.169.254/latest/api/token in 2ms - Server \
             returned non-2xx status code: 404 Not Found: ",
        );
        assert_eq!(
            Unusable::classify(&imds),
            Unusable::NoCredentials("404 Not Found".into())
        );
        assert_eq!(one_line("a: b: <?xml version=\"1.0\"?>\n<Error/>"), "a: b");
        let error = StoreError::from(body("404 Not Found", "NoSuchBucket", "No bucket"));
        assert!(
            error
                .to_string()
                .ends_with("404 Not Found (NoSuchBucket: No bucket)"),
            "{error}"
        );
    }
}
