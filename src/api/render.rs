//! JSON rendering of records, by hand: stored values are JSON text that the
//! apply loop already validated, so they are copied into the response as is,
//! never parsed again on the read path.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;

use crate::store::Record;

/// A JSON answer of already-rendered bytes, built directly (the hot path's: no `IntoResponseParts`
/// machinery, one header insert).
pub(super) fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut response = Response::new(axum::body::Body::from(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing to a Vec cannot fail");
}

/// `{"pk","sk","value","version"}` without a closing brace, so callers can add fields.
fn push_record_fields(out: &mut Vec<u8>, record: &Record) {
    out.extend_from_slice(b"{\"pk\":");
    push_str(out, &record.pk);
    out.extend_from_slice(b",\"sk\":");
    push_str(out, &record.sk);
    out.extend_from_slice(b",\"value\":");
    out.extend_from_slice(&record.value);
    out.extend_from_slice(b",\"version\":");
    out.extend_from_slice(itoa::Buffer::new().format(record.version).as_bytes());
}

pub(super) fn record(out: &mut Vec<u8>, record: &Record) {
    push_record_fields(out, record);
    out.push(b'}');
}

/// The body of a single-key GET, rendered from borrowed parts.
pub(super) fn get_response(pk: &str, sk: &str, version: u64, value: &[u8], namespace: &str, partition: u32, applied_next: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + pk.len() + sk.len() + value.len() + namespace.len());
    out.extend_from_slice(b"{\"pk\":");
    push_str(&mut out, pk);
    out.extend_from_slice(b",\"sk\":");
    push_str(&mut out, sk);
    out.extend_from_slice(b",\"value\":");
    out.extend_from_slice(value);
    out.extend_from_slice(b",\"version\":");
    out.extend_from_slice(itoa::Buffer::new().format(version).as_bytes());
    out.extend_from_slice(b",\"position\":\"");
    // Namespace names are [A-Za-z0-9_-]: no escaping needed.
    debug_assert!(namespace.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
    out.extend_from_slice(namespace.as_bytes());
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(partition).as_bytes());
    out.push(b':');
    out.extend_from_slice(itoa::Buffer::new().format(applied_next).as_bytes());
    out.extend_from_slice(b"\"}");
    out
}

/// `{"version", "position"}`: the answer to a write at offset `version`
/// (its position is the offset after it); `"duplicate": true` when it was a
/// retry of a write applied before at `version`.
pub(super) fn write_ack(version: u64, namespace: &str, partition: u32, duplicate: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + namespace.len());
    out.extend_from_slice(b"{\"version\":");
    out.extend_from_slice(itoa::Buffer::new().format(version).as_bytes());
    out.extend_from_slice(b",\"position\":");
    push_str(&mut out, &crate::position::Position::single_string(namespace, partition, version + 1));
    if duplicate {
        out.extend_from_slice(b",\"duplicate\":true");
    }
    out.push(b'}');
    out
}

/// `{"items": [...], ...tail}` where `tail` is rendered JSON object members.
pub(super) fn items(records: &[Option<Record>], tail: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + records.iter().flatten().map(|r| r.value.len() + 64).sum::<usize>());
    out.extend_from_slice(b"{\"items\":[");
    for (i, r) in records.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match r {
            Some(r) => record(&mut out, r),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b']');
    push_tail(&mut out, tail);
    out
}

/// Like `items`, from items already rendered as JSON text (`None` is null).
pub(super) fn rendered_items(rendered: &[Option<&[u8]>], tail: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + rendered.iter().flatten().map(|r| r.len() + 1).sum::<usize>());
    out.extend_from_slice(b"{\"items\":[");
    for (i, item) in rendered.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.unwrap_or(b"null"));
    }
    out.push(b']');
    push_tail(&mut out, tail);
    out
}

/// `,"key":value...}`: the remaining members and the closing brace.
fn push_tail(out: &mut Vec<u8>, tail: &[(&str, serde_json::Value)]) {
    for (key, value) in tail {
        out.push(b',');
        push_str(out, key);
        out.push(b':');
        serde_json::to_writer(&mut *out, value).expect("writing to a Vec cannot fail");
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_json() {
        let r = Record { pk: "a\"b".into(), sk: "".into(), version: 7, value: br#"{"x":[1,2]}"#.to_vec() };
        let body = get_response(&r.pk, &r.sk, r.version, &r.value, "default", 1, 8);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["pk"], "a\"b");
        assert_eq!(v["value"]["x"][1], 2);
        assert_eq!(v["version"], 7);
        assert_eq!(v["position"], "default:1:8");
        let ack: serde_json::Value = serde_json::from_slice(&write_ack(41, "default", 3, false)).unwrap();
        assert_eq!(ack, serde_json::json!({"version": 41, "position": "default:3:42"}));
        let ack: serde_json::Value = serde_json::from_slice(&write_ack(41, "default", 3, true)).unwrap();
        assert_eq!(ack, serde_json::json!({"version": 41, "position": "default:3:42", "duplicate": true}));
        let list = items(&[Some(r), None], &[("next_cursor", serde_json::Value::Null)]);
        let v: serde_json::Value = serde_json::from_slice(&list).unwrap();
        assert_eq!(v["items"][1], serde_json::Value::Null);
        assert!(v.get("next_cursor").is_some());
    }
}
