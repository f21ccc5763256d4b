//! JSON rendering of records, by hand: stored values are JSON text that the
//! apply loop already validated, so they are copied into the response as is,
//! never parsed again on the read path.

use crate::store::Record;

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
    out.extend_from_slice(itoa_u64(record.version).as_bytes());
}

fn itoa_u64(n: u64) -> String {
    n.to_string()
}

pub fn record(out: &mut Vec<u8>, record: &Record) {
    push_record_fields(out, record);
    out.push(b'}');
}

/// One record plus its read position: the body of a single-key GET.
pub fn record_with_position(record: &Record, position: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + record.pk.len() + record.sk.len() + record.value.len() + position.len());
    push_record_fields(&mut out, record);
    out.extend_from_slice(b",\"position\":");
    push_str(&mut out, position);
    out.push(b'}');
    out
}

/// `{"items": [...], ...tail}` where `tail` is rendered JSON object members.
pub fn items(records: &[Option<Record>], tail: &[(&str, serde_json::Value)]) -> Vec<u8> {
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
    for (key, value) in tail {
        out.push(b',');
        push_str(&mut out, key);
        out.push(b':');
        serde_json::to_writer(&mut out, value).expect("writing to a Vec cannot fail");
    }
    out.push(b'}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_json() {
        let r = Record { pk: "a\"b".into(), sk: "".into(), version: 7, value: br#"{"x":[1,2]}"#.to_vec() };
        let body = record_with_position(&r, "default:1:8");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["pk"], "a\"b");
        assert_eq!(v["value"]["x"][1], 2);
        assert_eq!(v["version"], 7);
        assert_eq!(v["position"], "default:1:8");
        let list = items(&[Some(r), None], &[("next_cursor", serde_json::Value::Null)]);
        let v: serde_json::Value = serde_json::from_slice(&list).unwrap();
        assert_eq!(v["items"][1], serde_json::Value::Null);
        assert!(v.get("next_cursor").is_some());
    }
}
