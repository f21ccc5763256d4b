//! Query-string parameters: parsed strictly. An unknown or repeated parameter
//! is a 400, so a typo like `?if_verison=3` never silently becomes an
//! unconditional write.

use std::collections::HashMap;
use std::time::Duration;

use crate::edge::ApiError;
use crate::limits::{WAIT_MS_DEFAULT, WAIT_MS_MAX};
use crate::node::read::Consistency;
use crate::position::Position;

pub(super) struct Params {
    values: HashMap<String, String>,
}

impl Params {
    /// Parses `query`, allowing only the parameters in `allowed`.
    pub(super) fn parse(query: Option<&str>, allowed: &[&str]) -> Result<Params, ApiError> {
        let mut values = HashMap::new();
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            if !allowed.contains(&key.as_ref()) {
                return Err(ApiError::bad_request(
                    "invalid_parameter",
                    format!("unknown query parameter {key:?}; this call takes: {}", allowed.join(", ")),
                ));
            }
            if values.insert(key.to_string(), value.to_string()).is_some() {
                return Err(ApiError::bad_request("invalid_parameter", format!("query parameter {key:?} is given twice")));
            }
        }
        Ok(Params { values })
    }

    pub(super) fn str(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub(super) fn u64(&self, key: &str) -> Result<Option<u64>, ApiError> {
        self.str(key)
            .map(|v| {
                v.parse::<u64>().map_err(|_| ApiError::bad_request("invalid_parameter", format!("{key} must be a non-negative integer, got {v:?}")))
            })
            .transpose()
    }

    pub(super) fn bool(&self, key: &str) -> Result<bool, ApiError> {
        match self.str(key) {
            None | Some("false") => Ok(false),
            Some("true") | Some("") => Ok(true),
            Some(other) => Err(ApiError::bad_request("invalid_parameter", format!("{key} must be true or false, got {other:?}"))),
        }
    }

    /// `timeout_ms`: how long a wait may take, bounded by `WAIT_MS_MAX`.
    pub(super) fn timeout(&self) -> Result<Duration, ApiError> {
        let ms = self.u64("timeout_ms")?.unwrap_or(WAIT_MS_DEFAULT);
        if ms > WAIT_MS_MAX {
            return Err(ApiError::bad_request("invalid_parameter", format!("timeout_ms is at most {WAIT_MS_MAX}, got {ms}")));
        }
        Ok(Duration::from_millis(ms))
    }

    /// `limit` of a listing's page: 1 to `LIST_LIMIT_MAX`, `LIST_LIMIT_DEFAULT` when absent.
    pub(super) fn list_limit(&self) -> Result<usize, ApiError> {
        let limit = self.u64("limit")?.map_or(crate::limits::LIST_LIMIT_DEFAULT, |l| l as usize);
        if limit == 0 || limit > crate::limits::LIST_LIMIT_MAX {
            let message = format!("limit must be between 1 and {}, got {limit}", crate::limits::LIST_LIMIT_MAX);
            return Err(ApiError::bad_request("invalid_parameter", message));
        }
        Ok(limit)
    }

    /// `after=POSITION` and/or `consistency=local|strong`.
    pub(super) fn consistency(&self) -> Result<Consistency, ApiError> {
        let after =
            self.str("after").map(|p| Position::parse(p).map_err(|e| ApiError::bad_request("invalid_position", e.to_string()))).transpose()?;
        match (self.str("consistency"), after) {
            (Some("strong"), Some(_)) => Err(ApiError::bad_request(
                "invalid_parameter",
                "use either after=POSITION or consistency=strong, not both (strong already includes every acknowledged write)",
            )),
            (Some("strong"), None) => Ok(Consistency::Strong),
            (None | Some("local"), Some(position)) => Ok(Consistency::After(position)),
            (None | Some("local"), None) => Ok(Consistency::Local),
            (Some(other), _) => Err(ApiError::bad_request("invalid_parameter", format!("consistency must be local or strong, got {other:?}"))),
        }
    }

    /// `wait=applied` (the only value).
    pub(super) fn wait_applied(&self) -> Result<bool, ApiError> {
        match self.str("wait") {
            None => Ok(false),
            Some("applied") => Ok(true),
            Some(other) => Err(ApiError::bad_request("invalid_parameter", format!("wait must be \"applied\", got {other:?}"))),
        }
    }
}
