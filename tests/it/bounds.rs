//! `docs/bounds.md`: every bound written in the code (a numeric or duration
//! `const` outside tests), generated from the sources so it cannot drift;
//! the settings' bounds are in `docs/settings.md`, generated likewise.
//! `TERN_UPDATE_DOCS=1 cargo test --release --test it bounds` rewrites it.

/// The types a bound has.
const BOUND_TYPES: &[&str] = &["usize", "u64", "u32", "u16", "i32", "i64", "Duration", "std::time::Duration", "chrono::TimeDelta"];

/// One bound: where, its name, its value as written, the first sentence of its doc.
#[derive(Debug, PartialEq)]
struct BoundConst {
    file: String,
    name: String,
    value: String,
    doc: String,
}

/// The bounds declared in one source file (`relative` to `src/`).
fn bounds_in(relative: &str, source: &str) -> Vec<BoundConst> {
    let mut found = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    let mut in_test_block = false;
    for line in source.lines() {
        if line.starts_with("#[cfg(test)]") {
            in_test_block = true;
        } else if line == "}" {
            in_test_block = false;
        }
        let trimmed = line.trim();
        if let Some(text) = trimmed.strip_prefix("///") {
            doc.push(text.trim());
            continue;
        }
        // Any visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in …)`.
        let declaration = match trimmed.strip_prefix("pub") {
            Some(rest) if rest.starts_with(' ') => rest.trim_start(),
            Some(rest) if rest.starts_with('(') => rest.split_once(')').map_or(trimmed, |(_, after)| after.trim_start()),
            _ => trimmed,
        };
        if let (false, Some(rest)) = (in_test_block, declaration.strip_prefix("const ")) {
            if let Some((name, rest)) = rest.split_once(':') {
                if let Some((ty, value)) = rest.split_once('=') {
                    let value = value.trim().trim_end_matches(';').trim();
                    if BOUND_TYPES.contains(&ty.trim()) && !value.is_empty() && trimmed.ends_with(';') {
                        let text = doc.join(" ");
                        let sentence = text.split_inclusive(". ").next().unwrap_or("").trim().to_string();
                        found.push(BoundConst { file: relative.to_string(), name: name.trim().to_string(), value: value.to_string(), doc: sentence });
                    }
                }
            }
        }
        if !trimmed.starts_with("#[") {
            doc.clear();
        }
    }
    found
}

fn markdown(bounds: &[BoundConst]) -> String {
    let mut out = String::from(
        "# Bounds\n\n<!-- Generated from the sources by tests/it/bounds.rs: TERN_UPDATE_DOCS=1 cargo test --release --test it bounds. Do not edit. -->\n\n\
         Every bound written in Tern's code: queues, batches, retries, waits, sizes. The settings (each with its own\n\
         bound) are in [settings.md](settings.md); the limits a client meets are in [api.md](api.md).\n\n\
         ## What one client can make a node hold\n\n\
         Per connection, whatever the client does (never reads, reads slowly, sends at the maximum size, repeats):\n\n\
         | protocol | bound |\n|---|---|\n\
         | SSE watch (HTTP/1.1) | its watch queue (`watch_queue_*` settings; shared events are counted, not copied), a state page \
         (`STATE_PAGE_BYTES_MAX`, 1 MiB), its outlet (`SSE_MESSAGES_PENDING_MAX` messages, at most `OUTLET_BYTES_MAX` = 1 MiB \
         plus one message) and one chunk in the transport's hands (at most an outlet's worth) |\n\
         | HTTP/2 connection | at most `STREAMS_PER_CONNECTION_MAX` (200) watches, each with its queue and state page; one \
         outlet (`OUTLET_MESSAGES_MAX`, `OUTLET_BYTES_MAX`); per stream `WINDOW_CHECK_BYTES` plus one round of the outlet beyond \
         the client's window |\n\
         | `/v1/ws` connection | at most `WATCHES_PER_CONNECTION_MAX` (1,000) watches, each with its queue and state page; one \
         outlet (`OUTBOUND_MESSAGES_MAX`, `OUTLET_BYTES_MAX`); client messages of `CLIENT_MESSAGE_BYTES_MAX` (64 KiB), \
         `CLIENT_MESSAGES_PENDING_MAX` read ahead |\n\
         | Firebase stream | its first value, at most `ANSWER_BYTES_MAX` (64 MiB; all first values being gathered on a node: \
         `GATHERING_BYTES_NODE_MAX`, 256 MiB), then as an SSE watch |\n\
         | realtime (`/.ws`) | `OUTBOUND_BYTES_MAX` (4 MiB) of unread answers, then the node stops reading it; closed after \
         `SLOW_CLIENT_MAX` (30 s) |\n\
         | any request | its body's limit (below), an answer of at most `ANSWER_BYTES_MAX` |\n\n\
         Per node: at most `http_connections_max` connections (settings.md; one past it is closed as accepted). \
         `tests/it/hostile.rs` holds 16 SSE, 16 HTTP/2 and 8 Firebase streams, 64 `/v1/ws` watches and 32 realtime \
         listens that never read, 4 slow readers, a flood of 64 KiB frames and 1,000 sub/unsub pairs over a 32 MiB \
         state with 16 MiB of writes: the node grows by ~300 MiB (asserted under `HOSTILE_GROWTH_MIB_MAX`, 450 MiB) \
         while a well-behaved client is served.\n\n\
         ## Every constant\n\n\
         | where | constant | value | what |\n|---|---|---|---|\n",
    );
    for b in bounds {
        let cell = |text: &str| text.replace('|', "\\|");
        out.push_str(&format!("| `{}` | `{}` | `{}` | {} |\n", b.file, b.name, cell(&b.value), cell(&b.doc)));
    }
    out
}

#[test]
fn the_bounds_doc_is_generated_from_the_sources() {
    let root = crate::common::checkout();
    let mut bounds = Vec::new();
    for (relative, text) in crate::common::rust_sources() {
        bounds.extend(bounds_in(&relative.display().to_string(), &text));
    }
    assert!(bounds.len() > 40, "found the bounds ({})", bounds.len());
    let expected = markdown(&bounds);
    let path = root.join("docs/bounds.md");
    if std::env::var_os("TERN_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).expect("docs/bounds.md is writable");
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(actual == expected, "docs/bounds.md is stale: run TERN_UPDATE_DOCS=1 cargo test --release --test it bounds");
}

#[test]
fn bounds_are_found_with_their_docs_and_test_consts_are_not() {
    let source = "/// Most things. More words.\n#[allow(x)]\npub(crate) const THINGS_MAX: usize = 4 * 1024;\nconst NAME: &str = \"x\";\n\
                  /// Fewer.\npub(super) const FEW_MAX: u32 = 2;\n\
                  const WAIT: Duration = Duration::from_secs(1);\n#[cfg(test)]\nmod tests {\n    const T_MAX: usize = 1;\n}\n";
    let found = bounds_in("a.rs", source);
    assert_eq!(
        found,
        [
            BoundConst { file: "a.rs".into(), name: "THINGS_MAX".into(), value: "4 * 1024".into(), doc: "Most things.".into() },
            BoundConst { file: "a.rs".into(), name: "FEW_MAX".into(), value: "2".into(), doc: "Fewer.".into() },
            BoundConst { file: "a.rs".into(), name: "WAIT".into(), value: "Duration::from_secs(1)".into(), doc: String::new() },
        ]
    );
}
