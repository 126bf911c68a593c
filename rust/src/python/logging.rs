//! The core's log output: tracing to stderr, text or JSON, in the format Python's logging uses.

use std::io::{self, IsTerminal, Write};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use time::macros::format_description;
use tracing_subscriber::fmt::time::UtcTime;
use tracing_subscriber::EnvFilter;

#[pyfunction]
pub(super) fn init_logging(level: &str, format: &str) -> PyResult<()> {
    let level = match level {
        "warning" => "warn",
        other => other,
    };
    // The broker's own events at the chosen level; libraries only when they warn.
    let filter = EnvFilter::try_new(format!("warn,kafscale={level}"))
        .map_err(|e| PyValueError::new_err(format!("KAFSCALE_LOG_LEVEL={level}: {e}")))?;
    // Same shape as Python's lines: `2026-11-21T13:10:00.123Z  INFO target: message`.
    let timer = UtcTime::new(format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    ));
    let ansi = io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_timer(timer)
        .with_ansi(ansi);
    // A second call (tests start several brokers in one process) keeps the first subscriber,
    // so the "already set" error is deliberately ignored.
    let _ = match format {
        // JSON escapes control characters itself.
        "json" => builder
            .with_writer(io::stderr)
            .json()
            .flatten_event(true)
            .try_init(),
        "text" => builder
            .with_writer(move || EscapingStderr { keep_ansi: ansi })
            .try_init(),
        other => {
            return Err(PyValueError::new_err(format!(
                "KAFSCALE_LOG_FORMAT={other}: use text or json"
            )))
        }
    };
    Ok(())
}

/// stderr for the text format, with the control characters inside an event escaped (`\n`,
/// `\x1b`...), so a name a client chose (a topic with a newline in it) cannot forge a log line,
/// whether it reaches the event as a `%` field or in the message, which tracing writes as they
/// are. The formatter hands over each event, its final newline included, in one write.
struct EscapingStderr {
    /// The escape character of the formatter's own colours, on a terminal.
    keep_ansi: bool,
}

impl Write for EscapingStderr {
    fn write(&mut self, event: &[u8]) -> io::Result<usize> {
        io::stderr()
            .lock()
            .write_all(&escaped(event, self.keep_ansi))?;
        Ok(event.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

/// One event as one line: control characters before its final newline escaped.
fn escaped(event: &[u8], keep_ansi: bool) -> Vec<u8> {
    let (line, end) = match event.strip_suffix(b"\n") {
        Some(line) => (line, &b"\n"[..]),
        None => (event, &b""[..]),
    };
    let mut out = Vec::with_capacity(event.len() + end.len());
    for &byte in line {
        match byte {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x1b if keep_ansi => out.push(byte),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{byte:02x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.extend_from_slice(end);
    out
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn an_event_stays_one_line() {
        let forged = "INFO topic deleted: a\n2026-01-01T00:00:00.000Z ERROR forged\r\u{1b}[2J\n";
        assert_eq!(
            escaped(forged.as_bytes(), false),
            b"INFO topic deleted: a\\n2026-01-01T00:00:00.000Z ERROR forged\\r\\x1b[2J\n"
        );
        // the formatter's own colours survive on a terminal; UTF-8 passes untouched
        let coloured = "\u{1b}[32m INFO\u{1b}[0m caf\u{e9} \u{7f}\n";
        assert_eq!(
            escaped(coloured.as_bytes(), true),
            "\u{1b}[32m INFO\u{1b}[0m caf\u{e9} \\x7f\n".as_bytes()
        );
        assert_eq!(escaped(b"no newline", false), b"no newline");
    }
}
