//! Timestamps on the wire: epoch milliseconds, written as RFC 3339 UTC.

/// Now, as an RFC 3339 UTC timestamp with milliseconds: the form every timestamp on the wire
/// takes.
pub fn now_rfc3339() -> String {
    format_millis(now_millis())
}

/// Milliseconds since the Unix epoch: what the host keeps, formatting only when it writes.
pub fn now_millis() -> i64 {
    // Read on every request: the system clock straight, without a calendar conversion.
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds, the wire's timestamp form.
pub fn format_millis(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
