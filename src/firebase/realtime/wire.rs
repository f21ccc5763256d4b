//! The realtime protocol's envelopes and framing (what the SDK's
//! `Connection` and `WebSocketConnection` classes expect).
//!
//! Every message is one JSON object, `{"t": layer, "d": payload}`:
//! - layer `c` (control): `{"t":"h","d":{"ts","v","h","s"}}` the server's
//!   hello (its clock, the protocol version `5`, the host to use, the
//!   session id); `{"t":"p"}` a client ping, answered by the pong
//!   `{"t":"o"}`; `{"t":"s","d":reason}` shutdown; `{"t":"r","d":host}`
//!   reset (connect to that host instead); `{"t":"e","d":text}` error.
//! - layer `d` (data): a client request `{"r": n, "a": action, "b": body}`,
//!   answered by `{"r": n, "b": {"s": status, "d": data}}`; a server push
//!   `{"a": action, "b": body}`.
//!
//! A message longer than 16,384 characters goes as several WebSocket text
//! frames: first the count of frames (at most 6 digits), then the pieces,
//! which joined are the message. Both sides do this. A frame `0` from the
//! client is its keep-alive (sent after 45 s of silence).

use serde_json::{json, Value};

/// The SDK's frame size: a longer message is split.
pub(super) const FRAME_CHARS_MAX: usize = 16_384;
/// Largest client message once joined: a write's data is bounded by the
/// mutation limit, plus its envelope.
pub(crate) const MESSAGE_BYTES_MAX: usize = crate::limits::MUTATION_BYTES_MAX + 64 * 1024;
/// The protocol version this server speaks (`v=5`).
pub(super) const PROTOCOL_VERSION: &str = "5";

/// Joins the client's frames into messages.
#[derive(Default)]
pub(crate) struct Reassembler {
    /// Frames still expected for the message being joined (0: none).
    expected: usize,
    joined: String,
    /// Bytes of the message being joined, kept or not.
    bytes: usize,
    /// The message is over `MESSAGE_BYTES_MAX`: its frames are read and
    /// dropped; what was kept of its start names the request to refuse.
    over: bool,
}

/// What the client's frames made.
#[derive(Debug, PartialEq)]
pub(crate) enum Assembled {
    Message(String),
    /// A message over `MESSAGE_BYTES_MAX`, dropped as it came (memory stays
    /// bounded); `r` is its request's number when its start names one (the
    /// SDK writes `{"t":"d","d":{"r":N,...` first), so it can be refused.
    TooLarge {
        r: Option<u64>,
        bytes: usize,
    },
}

impl Reassembler {
    /// Takes one text frame; returns what it completes, if anything.
    pub(crate) fn push(&mut self, frame: &str) -> Option<Assembled> {
        if self.expected > 0 {
            self.bytes += frame.len();
            if self.bytes > MESSAGE_BYTES_MAX && !self.over {
                self.over = true;
                self.joined.truncate(REQUEST_NUMBER_PREFIX_BYTES.min(self.joined.len()));
            }
            if !self.over {
                self.joined.push_str(frame);
            }
            self.expected -= 1;
            if self.expected > 0 {
                return None;
            }
            let joined = std::mem::take(&mut self.joined);
            let bytes = std::mem::take(&mut self.bytes);
            return Some(match std::mem::take(&mut self.over) {
                false => Assembled::Message(joined),
                true => Assembled::TooLarge { r: request_number(&joined), bytes },
            });
        }
        if frame.len() <= 6 && !frame.is_empty() && frame.bytes().all(|b| b.is_ascii_digit()) {
            // `0` is the client's keep-alive; `1` announces a single frame.
            self.expected = frame.parse().expect("at most 6 digits");
            return None;
        }
        if frame.len() > MESSAGE_BYTES_MAX {
            return Some(Assembled::TooLarge { r: request_number(frame), bytes: frame.len() });
        }
        Some(Assembled::Message(frame.to_string()))
    }
}

/// Bytes of a message's start kept to find its request number.
const REQUEST_NUMBER_PREFIX_BYTES: usize = 64;

/// The request number in a data message's start, `{"t":"d","d":{"r":N`.
fn request_number(start: &str) -> Option<u64> {
    let rest = start.strip_prefix(r#"{"t":"d","d":{"r":"#)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `message` as the frames it goes out in: itself, or the count and then
/// pieces of at most `FRAME_CHARS_MAX` bytes cut at character boundaries
/// (bytes bound the SDK's UTF-16 count from above).
pub(super) fn frames(message: String) -> Vec<String> {
    if message.len() <= FRAME_CHARS_MAX {
        return vec![message];
    }
    let mut pieces = Vec::with_capacity(message.len() / FRAME_CHARS_MAX + 2);
    let mut rest = message.as_str();
    while !rest.is_empty() {
        let mut cut = rest.len().min(FRAME_CHARS_MAX);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        pieces.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    let mut out = Vec::with_capacity(pieces.len() + 1);
    out.push(pieces.len().to_string());
    out.extend(pieces);
    out
}

/// The server's hello, sent first on every connection.
pub(super) fn hello(now_ms: u64, host: &str, session: &str) -> String {
    json!({"t": "c", "d": {"t": "h", "d": {"ts": now_ms, "v": PROTOCOL_VERSION, "h": host, "s": session}}}).to_string()
}

/// Tells the client its credential is no longer valid (`ac`, as Firebase
/// sends when a token expires); the connection closes after it.
pub(super) fn auth_revoked() -> String {
    json!({"t": "d", "d": {"a": "ac", "b": {"s": "expired_token", "d": "Auth token is expired or revoked."}}}).to_string()
}

pub(super) fn pong() -> String {
    json!({"t": "c", "d": {"t": "o", "d": {}}}).to_string()
}

/// Tells the client to connect to `host` instead (its SDK reconnects there).
pub(super) fn reset(host: &str) -> String {
    json!({"t": "c", "d": {"t": "r", "d": host}}).to_string()
}

/// A server error the SDK logs (`Server Error: …`); the connection closes after it.
pub(super) fn error(text: &str) -> String {
    json!({"t": "c", "d": {"t": "e", "d": text}}).to_string()
}

/// The answer to request `r`.
pub(super) fn response(r: u64, status: &str, data: Value) -> String {
    json!({"t": "d", "d": {"r": r, "b": {"s": status, "d": data}}}).to_string()
}

pub(super) fn ok(r: u64, data: Value) -> String {
    response(r, "ok", data)
}

/// One client message, parsed.
#[derive(Debug, PartialEq)]
pub(crate) enum ClientMessage {
    /// A control ping (`{"t":"c","d":{"t":"p"}}`); other control messages
    /// (a transport switch's `a`/`n`) need no answer.
    Ping,
    Control,
    /// A request: its number, action and body.
    Request {
        r: u64,
        action: String,
        body: Value,
    },
}

pub(crate) fn parse(text: &str) -> Result<ClientMessage, String> {
    let message: Value = serde_json::from_str(text).map_err(|e| format!("a message must be JSON: {e}"))?;
    let layer = message.get("t").and_then(Value::as_str).ok_or("a message needs its layer \"t\"")?;
    let payload = message.get("d").ok_or("a message needs its payload \"d\"")?;
    match layer {
        "c" => Ok(match payload.get("t").and_then(Value::as_str) {
            Some("p") => ClientMessage::Ping,
            _ => ClientMessage::Control,
        }),
        "d" => {
            let r = payload.get("r").and_then(Value::as_u64).ok_or("a request needs its number \"r\"")?;
            let action = payload.get("a").and_then(Value::as_str).ok_or("a request needs its action \"a\"")?.to_string();
            let body = payload.get("b").cloned().unwrap_or(Value::Null);
            Ok(ClientMessage::Request { r, action, body })
        }
        other => Err(format!("unknown layer {other:?}: c or d")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_goes_as_its_frame_count_then_pieces_that_join_to_it() {
        let message = format!("{{\"d\":\"{}\"}}", "é".repeat(20_000));
        let out = frames(message.clone());
        assert_eq!(out[0], (out.len() - 1).to_string());
        assert!(out[1..].iter().all(|f| f.len() <= FRAME_CHARS_MAX));
        let mut joiner = Reassembler::default();
        let mut whole = None;
        for frame in &out {
            whole = joiner.push(frame);
        }
        assert_eq!(whole, Some(Assembled::Message(message)));
        assert_eq!(frames("{}".into()), vec!["{}".to_string()]);
    }

    #[test]
    fn keep_alives_and_counts_are_not_messages() {
        let mut joiner = Reassembler::default();
        assert_eq!(joiner.push("0"), None, "the client's keep-alive");
        assert_eq!(joiner.push("{\"t\":\"c\"}"), Some(Assembled::Message("{\"t\":\"c\"}".into())));
    }

    #[test]
    fn a_message_over_the_bound_is_dropped_as_it_comes_and_names_its_request() {
        let message = format!(r#"{{"t":"d","d":{{"r":42,"a":"p","b":{{"p":"/x","d":"{}"}}}}}}"#, "y".repeat(MESSAGE_BYTES_MAX));
        let mut joiner = Reassembler::default();
        let mut last = None;
        for frame in frames(message.clone()) {
            last = joiner.push(&frame);
            assert!(joiner.joined.len() <= MESSAGE_BYTES_MAX, "never more than the bound held");
        }
        assert_eq!(last, Some(Assembled::TooLarge { r: Some(42), bytes: message.len() }));
        // The next message is read as usual.
        assert_eq!(joiner.push("{}"), Some(Assembled::Message("{}".into())));
    }

    #[test]
    fn requests_and_pings_parse_and_bad_messages_say_why() {
        assert_eq!(parse(r#"{"t":"c","d":{"t":"p","d":{}}}"#).unwrap(), ClientMessage::Ping);
        assert_eq!(
            parse(r#"{"t":"d","d":{"r":3,"a":"q","b":{"p":"/a","h":""}}}"#).unwrap(),
            ClientMessage::Request { r: 3, action: "q".into(), body: json!({"p": "/a", "h": ""}) }
        );
        assert!(parse("nope").unwrap_err().contains("JSON"));
        assert!(parse(r#"{"t":"d","d":{"a":"q"}}"#).unwrap_err().contains("\"r\""));
        assert!(parse(r#"{"t":"x","d":{}}"#).unwrap_err().contains("layer"));
    }
}
