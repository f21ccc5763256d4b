//! API errors: `{"error": {"code", "message", ...details}}` with the right status.
//! Every client-caused problem is a 4xx with a precise message; 5xx means the
//! node (not the request) has a problem, and 503 says it is worth retrying.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::limits::LimitError;
use crate::log::LogError;
use crate::node::read::ReadError;
use crate::node::write::WriteError;
use crate::node::NamespaceError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Extra fields inside the error object (e.g. `position`, `current_version`).
    pub details: Map<String, Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), details: Map::new() }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.details.insert(key.to_string(), value.into());
        self
    }

    pub fn unknown_namespace(ns: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "namespace_not_found",
            format!("namespace {ns:?} does not exist; create it with PUT /v1/ns/{ns} {{\"partitions\": N}}"),
        )
    }
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> ApiError {
        let status = if e.too_large { StatusCode::PAYLOAD_TOO_LARGE } else { StatusCode::BAD_REQUEST };
        ApiError::new(status, e.code, e.message)
    }
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> ApiError {
        match e {
            LogError::EntryTooLarge { .. } | LogError::TooLargeForTopic { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "entry_too_large", e.to_string())
            }
            LogError::Unsupported(message) => ApiError::bad_request("invalid_source_topic", message),
            LogError::SourceConflict(message) => ApiError::new(StatusCode::CONFLICT, "source_topic_conflict", message),
            LogError::Ambiguous(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "outcome_unknown", e.to_string()),
            other => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "log_unavailable", format!("{other}; the write was not acknowledged, retry it")),
        }
    }
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> ApiError {
        let message = e.to_string();
        match e {
            WriteError::Log(log) => log.into(),
            WriteError::Reserved(reserved) => {
                ApiError::bad_request("reserved_key", reserved.message).with("op_index", reserved.op_index)
            }
            WriteError::Journal(journal) => journal_error(journal),
            WriteError::JournaledNotCopied { write_id, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "journaled_not_copied", message).with("write_id", String::from_utf8_lossy(&write_id))
            }
            WriteError::JournaledCannotWait => ApiError::bad_request(
                "invalid_parameter",
                "wait=applied cannot go with durability=journaled: a journaled write is answered before it is sequenced; use durability=sequenced to wait",
            ),
            WriteError::BehindJournal { partition, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "behind_journal", message).with("partition", partition)
            }
            WriteError::Refused { partition, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "partition_unavailable", message).with("partition", partition)
            }
            WriteError::NotHeld { partition } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_held",
                format!("{message}; nothing was written: the partition is moving between nodes, retry"),
            )
            .with("partition", partition),
            WriteError::NamespaceDeleted { ns } => ApiError::unknown_namespace(&ns),
            WriteError::ConditionFailed { op_index, current_version, position } => ApiError::new(
                StatusCode::CONFLICT,
                "condition_failed",
                match current_version {
                    Some(v) => format!("condition failed on op {op_index}: the record is at version {v}; nothing was written"),
                    None => format!("condition failed on op {op_index}: the record does not exist; nothing was written"),
                },
            )
            .with("op_index", op_index)
            .with("current_version", current_version)
            .with("position", position.to_string()),
            WriteError::NotApplied { version, position, .. } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_applied",
                format!("{message}; read with after={position} to see it once applied"),
            )
            .with("version", version)
            .with("position", position.to_string()),
            WriteError::Rejected { version, .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "rejected_at_apply", message).with("version", version)
            }
            WriteError::OutcomeUnknown { version } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "outcome_unknown", message).with("version", version)
            }
            WriteError::KeyReused { of } => ApiError::new(StatusCode::CONFLICT, "idempotency_key_reused", message).with("version", of),
        }
    }
}

/// A journaled write the journal did not take.
fn journal_error(error: crate::journal::JournalError) -> ApiError {
    use crate::journal::JournalError;
    let (status, code) = match &error {
        JournalError::Full { .. } => (StatusCode::INSUFFICIENT_STORAGE, "journal_full"),
        JournalError::TooOld { .. } => (StatusCode::SERVICE_UNAVAILABLE, "journal_too_old"),
        JournalError::PartitionsChanged { .. } => (StatusCode::CONFLICT, "journal_conflict"),
        JournalError::Log(_) | JournalError::Objects(_) | JournalError::ObjectsUnavailable(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "journal_unavailable")
        }
    };
    ApiError::new(status, code, error.to_string())
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> ApiError {
        let message = e.to_string();
        match e {
            ReadError::Refused { partition, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "partition_unavailable", message).with("partition", partition)
            }
            ReadError::WrongNamespace { .. } | ReadError::PositionPartitionUnknown { .. } | ReadError::PositionElsewhere { .. } => {
                ApiError::bad_request("invalid_position", message)
            }
            ReadError::NotCaughtUp { position, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_caught_up", message).with("position", position.to_string())
            }
            ReadError::Log(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "log_unavailable", message),
            ReadError::Isolated => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "isolated", message),
        }
    }
}

impl From<crate::watch::WatchError> for ApiError {
    fn from(e: crate::watch::WatchError) -> ApiError {
        use crate::watch::WatchError;
        let message = e.to_string();
        match e {
            WatchError::NamespaceNotFound(ns) => ApiError::unknown_namespace(&ns),
            WatchError::InvalidPosition(_) => ApiError::bad_request("invalid_position", message),
            WatchError::Unavailable(_) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "partition_unavailable", message),
            WatchError::NotHeld { partition } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_held", message).with("partition", partition),
            WatchError::TooMany { .. } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "too_many_subscribers", message),
        }
    }
}

impl From<NamespaceError> for ApiError {
    fn from(e: NamespaceError) -> ApiError {
        match e {
            NamespaceError::Invalid(limit) => limit.into(),
            NamespaceError::Mismatch { existing, .. } => {
                ApiError::new(StatusCode::CONFLICT, "namespace_exists", e.to_string()).with("partitions", existing)
            }
            NamespaceError::SourceMismatch(_) => ApiError::new(StatusCode::CONFLICT, "source_topic_conflict", e.to_string()),
            NamespaceError::Log(log) => log.into(),
            NamespaceError::Store(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store_error", e.to_string()),
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> ApiError {
        match e.unavailable {
            true => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "partition_unavailable", e.message),
            false => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store_error", e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = Map::new();
        // A code is snake_case, so a valid header value; an answer never
        // panics for it, so a code that is not goes without the header.
        let code = axum::http::HeaderValue::from_str(self.code).ok();
        debug_assert!(code.is_some(), "error codes are snake_case: {:?}", self.code);
        error.insert("code".into(), Value::from(self.code));
        let challenge = super::access::challenge(&self);
        error.insert("message".into(), Value::from(self.message));
        let retry_after_s = self.details.get("retry_after_s").and_then(Value::as_u64);
        error.extend(self.details);
        let mut response = (self.status, axum::Json(json!({ "error": error }))).into_response();
        if let Some(code) = code {
            response.headers_mut().insert(super::forward::ERROR_CODE_HEADER, code);
        }
        if let Some(challenge) = challenge {
            response.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, challenge);
        }
        if let (StatusCode::TOO_MANY_REQUESTS, Some(seconds)) = (self.status, retry_after_s) {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code is in the body and, for a forwarding node, in a header.
    #[test]
    fn an_error_answer_names_its_code_in_the_body_and_a_header() {
        let response = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_held", "node x no longer holds ns/0").into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[crate::edge::ERROR_CODE_HEADER], "not_held");
    }
}
