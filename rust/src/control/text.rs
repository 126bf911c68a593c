//! Strings across the bridge: the codec's `StrBytes` into Python's `str` and back.

use kafka_protocol::protocol::StrBytes;

/// A request's string, for Python.
pub(super) fn read(s: &StrBytes) -> String {
    s.as_str().to_owned()
}

/// A request's nullable string, for Python.
pub(super) fn read_opt(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(read)
}

/// An answer's string, for the codec.
pub(super) fn wire(s: String) -> StrBytes {
    StrBytes::from_string(s)
}

/// An answer's nullable string, for the codec.
pub(super) fn wire_opt(s: Option<String>) -> Option<StrBytes> {
    s.map(StrBytes::from_string)
}
