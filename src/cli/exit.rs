//! What a client command's exit status says, so scripts can tell outcomes
//! apart without reading messages (documented in `tern --help` and
//! docs/api.md, "The CLI"):
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | any other error (the node answered 5xx, a bad value, ...) |
//! | 2 | usage: the command line itself is wrong (clap's own status, and a `--url` that is no URL) |
//! | 3 | not found (404) |
//! | 4 | conflict: a condition failed or the resource differs (409, 412) |
//! | 5 | refused: no valid token, or no grant for it (401, 403, 429) |
//! | 6 | unreachable: no connection to the node, or no answer in time |

use std::fmt;

/// The exit statuses above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    Other = 1,
    Usage = 2,
    NotFound = 3,
    Conflict = 4,
    Refused = 5,
    Unreachable = 6,
}

/// An error whose exit status is not the default 1.
#[derive(Debug)]
pub(super) struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The exit status an answer's HTTP status calls for.
pub(super) fn exit_of_status(status: u16) -> Exit {
    match status {
        404 => Exit::NotFound,
        409 | 412 => Exit::Conflict,
        401 | 403 | 429 => Exit::Refused,
        _ => Exit::Other,
    }
}

/// A request that got no answer, said with its cause and what to check:
/// "connection refused — is `tern dev` running at http://…?".
pub(super) fn unreachable(error: &reqwest::Error) -> CliError {
    let base = error.url().map_or_else(|| "the node".to_string(), |url| base_of(url.as_str()));
    let cause = root_cause(error);
    if error.is_builder() {
        // No request was made: the URL itself is wrong (`--url localhost:7070`).
        let message = format!("--url (or TERN_URL) is not a URL Tern can be reached at ({cause}): give http://HOST:PORT or https://HOST:PORT");
        return CliError { exit: Exit::Usage, message };
    }
    let hint = if error.is_timeout() {
        format!("no answer in time from {base}")
    } else if cause.contains("Connection refused") {
        format!("connection refused — is `tern dev` (or `tern serve`) running at {base}? (--url, TERN_URL)")
    } else if cause.contains("dns error") || cause.contains("failed to lookup address") {
        format!("the host of {base} is not known ({cause})")
    } else {
        format!("cannot reach {base}: {cause}")
    };
    CliError { exit: Exit::Unreachable, message: hint }
}

/// The innermost error's text (reqwest's own says only "error sending request").
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    innermost.to_string()
}

/// `scheme://host:port` of `url`, without any `user:password@` (never printed).
fn base_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
            let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
            format!("{scheme}://{host}")
        }
        None => url.to_string(),
    }
}

/// The exit status for `error` (`main`'s last step).
pub fn status_of(error: &anyhow::Error) -> i32 {
    error.downcast_ref::<CliError>().map_or(Exit::Other, |e| e.exit) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_answer_has_its_own_status() {
        assert_eq!(exit_of_status(404), Exit::NotFound);
        assert_eq!(exit_of_status(409), Exit::Conflict);
        assert_eq!(exit_of_status(412), Exit::Conflict);
        assert_eq!(exit_of_status(401), Exit::Refused);
        assert_eq!(exit_of_status(403), Exit::Refused);
        assert_eq!(exit_of_status(500), Exit::Other);
        assert_eq!(exit_of_status(400), Exit::Other);
        let error = anyhow::Error::new(CliError { exit: Exit::Conflict, message: "x".into() });
        assert_eq!(status_of(&error), 4);
        assert_eq!(status_of(&anyhow::anyhow!("plain")), 1);
    }

    #[test]
    fn the_base_of_a_url_is_its_scheme_and_authority() {
        assert_eq!(base_of("http://127.0.0.1:7070/v1/ns/default/kv/a"), "http://127.0.0.1:7070");
        assert_eq!(base_of("https://tern.example"), "https://tern.example");
        assert_eq!(base_of("https://user:secret@tern.example:8443/v1?x"), "https://tern.example:8443", "no credentials printed");
    }
}
