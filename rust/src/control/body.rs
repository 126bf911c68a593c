//! A control-plane request's decoded body (`ControlBody`, one variant per row of
//! `control_apis!`), as it travels from the connection to Python.

use crate::control::control_apis;
use crate::protocol::header::{Request, WireError};

/// Declares `ControlBody` (one variant per control API, holding its decoded request) and
/// what routing needs of it, from the rows of `control_apis!`.
macro_rules! control_body {
    ($($key:ident { versions: $min:literal..=$max:literal, request: $request:ident, $($rest:tt)* })*) => {
        /// A control-plane request's decoded body, as it travels to Python.
        #[derive(Debug, Clone)]
        pub enum ControlBody {
            $($key(kafka_protocol::messages::$request),)*
        }

        impl ControlBody {
            /// Whether `key` is a control-plane API (decoded here, answered by Python).
            pub(crate) fn serves(key: kafka_protocol::messages::ApiKey) -> bool {
                matches!(key, $(kafka_protocol::messages::ApiKey::$key)|*)
            }

            /// The request's body; Err if it does not decode (the connection is closed).
            pub(crate) fn decode(request: &Request) -> Result<ControlBody, WireError> {
                Ok(match request.api_key {
                    $(kafka_protocol::messages::ApiKey::$key => ControlBody::$key(request.body()?),)*
                    other => return Err(WireError::Undecodable {
                        api: other,
                        version: request.api_version,
                        reason: "not a control-plane API".into(),
                    }),
                })
            }
        }
    };
}

control_apis!(control_body);
