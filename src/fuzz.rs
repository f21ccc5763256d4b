//! Fuzz targets: every decoder that takes bytes from outside, as a function
//! of those bytes that panics only on a bug (an invariant it checks after
//! decoding: what decodes re-encodes to the same, what is accepted is
//! within its bounds).
//!
//! Two drivers run them. `fuzz/` (cargo fuzz, libFuzzer, nightly) runs one
//! target for as long as asked, guided by coverage: `scripts/fuzz.sh
//! TARGET SECONDS`. The test command runs every target for a few seconds
//! on stable (`tests/it/fuzz.rs`: the corpus in `fuzz/corpus/<target>/`,
//! then seeded mutations of it), so a target that breaks fails the tests.
//! A crash found either way is kept in the corpus, where every run replays it.
//!
//! Owns: the targets and their invariants. Never: starts a node or does I/O
//! beyond one temporary key file (the JWT target's).

use bytes::Bytes;

/// A fuzz target: bytes in, a panic only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name the drivers use.
pub const TARGETS: &[(&str, Target)] = &[
    ("entry", entry),
    ("v1_key", v1_key),
    ("firebase_path", firebase_path),
    ("position", position),
    ("rules", rules),
    ("realtime_frame", realtime_frame),
    ("jwt", jwt),
    ("api_key", api_key),
    ("procedure_definition", procedure_definition),
    ("snapshot_manifest", snapshot_manifest),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// A log entry (`codec`), as a partition of 4 reads it (the first byte
/// picks which): what decodes encodes to an entry that decodes the same.
pub fn entry(data: &[u8]) {
    let (partition, partitions) = (u32::from(data.first().copied().unwrap_or(0) % 4), 4);
    let Ok((mutation, time_ms)) = crate::codec::decode_timed(Bytes::copy_from_slice(data), partition, partitions) else { return };
    // The one entry without ops is a tick (or an outbox trim, a tick too).
    let encoded = match mutation.ops.is_empty() {
        true => crate::codec::encode_tick(time_ms),
        false => crate::codec::encode_at(&mutation, time_ms),
    };
    let again = crate::codec::decode_timed(Bytes::from(encoded), partition, partitions);
    assert_eq!(again.as_ref().ok(), Some(&(mutation, time_ms)), "a decoded entry re-encodes to itself");
}

/// A `/v1` record path: an accepted key is within the key bounds.
pub fn v1_key(data: &[u8]) {
    let Some(path) = text(data) else { return };
    if let Ok(key) = crate::api::keys::parse(path) {
        assert!(crate::limits::check_pk(&key.pk).is_ok(), "an accepted pk is a valid pk: {:?}", key.pk);
        if let Some(sk) = &key.sk {
            assert!(crate::limits::check_sk(sk).is_ok(), "an accepted sk is a valid sk");
        }
    }
}

/// A Firebase URL path: its keys join into a tree sk and split back.
pub fn firebase_path(data: &[u8]) {
    let Some(path) = text(data) else { return };
    let Ok(keys) = crate::tree::path::parse_url_path(path) else { return };
    if crate::tree::path::check_path_len(&keys).is_err() {
        return;
    }
    let sk = crate::tree::path::sk_of(&keys);
    let split: Vec<&str> = crate::tree::path::keys_of(&sk);
    assert_eq!(split, keys.iter().map(String::as_str).collect::<Vec<_>>(), "a path's keys survive the sk");
}

/// A position (`after=`, `Last-Event-ID`): it prints as it parses.
pub fn position(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(position) = crate::position::Position::parse(text) {
        let again = crate::position::Position::parse(&position.to_string());
        assert_eq!(again.as_ref().ok(), Some(&position), "a position parses as it prints");
    }
}

/// Firebase rules: a rules file and one expression parse or are refused.
pub fn rules(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = crate::firebase::rules::Rules::parse(text);
    let _ = crate::firebase::rules::expr::parse(text);
}

/// Realtime frames: the data split at its newlines is a run of frames;
/// each joined message parses or is refused, and a message over the bound
/// is reported as such, never kept.
pub fn realtime_frame(data: &[u8]) {
    use crate::firebase::realtime::wire::{parse, Assembled, Reassembler, MESSAGE_BYTES_MAX};
    let Some(text) = text(data) else { return };
    let mut joiner = Reassembler::default();
    for frame in text.split('\n') {
        match joiner.push(frame) {
            Some(Assembled::Message(message)) => {
                assert!(message.len() <= MESSAGE_BYTES_MAX, "a joined message is within the bound");
                let _ = parse(&message);
            }
            Some(Assembled::TooLarge { bytes, .. }) => assert!(bytes > MESSAGE_BYTES_MAX),
            None => {}
        }
    }
}

/// A JWT, against an HS256 key: anything but a token signed with it is refused.
pub fn jwt(data: &[u8]) {
    static VERIFIER: std::sync::OnceLock<crate::auth::jwt::JwtVerifier> = std::sync::OnceLock::new();
    let Some(token) = text(data) else { return };
    let verifier = VERIFIER.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("tern-fuzz-jwt-{}.key", std::process::id()));
        std::fs::write(&path, "fuzz-hs256-secret-of-at-least-32-bytes!").expect("a temporary key file");
        let config = crate::auth::jwt::JwtConfig {
            keys: vec![format!("HS256:{}", path.display())],
            jwks_file: None,
            audiences: Vec::new(),
            issuers: Vec::new(),
            grants_claim: "tern_grants".into(),
        };
        let verifier = crate::auth::jwt::JwtVerifier::load(&config).expect("the key loads").expect("one key");
        let _ = std::fs::remove_file(&path);
        verifier
    });
    if let Ok(verified) = verifier.verify(token) {
        // Only a token signed with the key verifies: the fuzzer cannot make one.
        panic!("a token no one signed verified: {:?}", verified.subject);
    }
}

/// An API key: split into id and secret or refused; an empty ring knows none.
pub fn api_key(data: &[u8]) {
    let Some(token) = text(data) else { return };
    if let Some((id, secret)) = crate::auth::keys::split(token) {
        assert!(!id.is_empty() && !secret.is_empty() && token.contains(id) && token.ends_with(secret));
    }
    assert!(crate::auth::keys::KeyRing::default().verify(token).is_none());
}

/// A procedure definition: an accepted one round-trips through its JSON.
pub fn procedure_definition(data: &[u8]) {
    let Ok(definition) = crate::procedure::definition::Definition::parse(data) else { return };
    let _ = definition.check_confined("ns");
    let again = crate::procedure::definition::Definition::parse(&definition.to_json());
    assert_eq!(again.as_ref().ok(), Some(&definition), "an accepted definition parses as it prints");
}

/// A snapshot manifest and a snapshot chunk, as read from object storage.
pub fn snapshot_manifest(data: &[u8]) {
    let _ = crate::snapshot::format::Manifest::open(data);
    let _ = crate::snapshot::format::decode_chunk(data);
}
