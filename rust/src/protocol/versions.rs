//! An API's served versions: the rows of both API tables (`server::apis::DATA_PLANE`,
//! `control::SERVED`) are made of these.

use kafka_protocol::messages::ApiKey;

pub(crate) struct SupportedApi {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}
