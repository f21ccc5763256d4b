//! One word per concept (ARCHITECTURE.md, "Words"), held by a test: an
//! identifier in `src/` never uses a synonym the words table replaced, nor
//! a homonym in a room where it would mean the other thing, nor the name
//! of a prelude item for a type of its own (`watch::From` once shadowed
//! `From`). Names the outside world sees (metric names, error codes,
//! protocol messages, settings) live in strings, or are listed below with
//! the reason they stay.
//!
//! The check reads every `.rs` file under `src/` as text, skips comments
//! and string literals, and looks at every identifier.

use std::path::Path;

/// A word that is never an identifier's (a synonym of a word in the table),
/// what to say instead, and the identifiers that keep it (other crates'
/// APIs, names the outside world sees).
const SYNONYMS: &[(&str, &str, &[&str])] = &[(
    "subscri",
    "watch (the fan-out's side of one is its watch queue)",
    &[
        // tokio's and chitchat's API: a watch channel's receiver, a key's listener.
        "subscribe",
        // The crate that formats the logs.
        "tracing_subscriber",
        // A setting's name: its file key, flag and TERN_ variable.
        "watch_subscribers_max",
    ],
)];

/// A word with two meanings once, each now in its own rooms: the rooms
/// (path prefixes under `src/`) where it may appear, what it means there,
/// and what the other meaning is called.
const HOMONYMS: &[(&str, &[&str], &str)] = &[
    (
        "journal",
        &["journal/", "node/", "edge/", "api/", "firebase/", "metrics.rs", "settings/", "cli/", "server.rs", "lib.rs", "codec.rs", "apply/", "partition/outcome.rs", "store/journal_lanes.rs", "store/layout.rs", "store/mod.rs", "sim/"],
        "the node's journal of journaled writes; what a store remembers of entries that did not apply is its `not_applied` record",
    ),
    (
        "outbox",
        &["procedure/", "node/publisher.rs", "log/", "store/", "apply/", "codec.rs", "api/outbox.rs", "api/procedures.rs", "api/namespaces.rs", "api/routes.rs", "api/mod.rs", "metrics.rs", "cli/", "node/lifecycle.rs", "node/reserved.rs", "node/write.rs"],
        "a procedure's outputs waiting to be published; what a watch session leaves for its transport is its `outlet`",
    ),
    (
        "publish",
        &["node/publisher.rs", "node/lifecycle.rs", "node/mod.rs", "node/config.rs", "log/kafka/", "log/traits.rs", "log/mod.rs", "apply/batch.rs", "codec.rs", "metrics.rs", "api/namespaces.rs", "cli/", "settings/"],
        "the outbox publisher's relaying to Kafka; the apply loop `advance`s a partition, the embedded log `acknowledge`s an append, gossip `advertise`s",
    ),
    (
        "settings",
        &["settings/", "server.rs", "cli/", "lib.rs"],
        "a node's settings (`settings/`); what a namespace is set to is its `options` (`node/namespace_options.rs`)",
    ),
];

/// Names of the prelude that no type of Tern's takes.
const PRELUDE: &[&str] = &[
    "From",
    "Into",
    "Option",
    "Result",
    "Vec",
    "String",
    "Box",
    "Some",
    "None",
    "Ok",
    "Err",
    "Default",
    "Clone",
    "Copy",
    "Drop",
    "Send",
    "Sync",
    "Sized",
    "Iterator",
    "Extend",
    "ToString",
    "ToOwned",
    "Fn",
    "FnMut",
    "FnOnce",
    "PartialEq",
    "Eq",
    "PartialOrd",
    "Ord",
];

/// The code of a line: no comment, string literals emptied.
fn code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' if in_string => {
                chars.next();
            }
            '"' => {
                in_string = !in_string;
                out.push('"');
            }
            '/' if !in_string && chars.peek() == Some(&'/') => break,
            _ if in_string => {}
            c => out.push(c),
        }
    }
    out
}

fn identifiers(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|word| word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// Every identifier of `source` (the file at `relative`, under `src/`) that
/// breaks the words table, as `file:line: message`.
fn violations(relative: &Path, source: &str) -> Vec<String> {
    let file = relative.to_string_lossy().replace('\\', "/");
    let mut found = Vec::new();
    for (number, line) in source.lines().enumerate() {
        let code = code(line);
        let place = format!("{file}:{}", number + 1);
        for ident in identifiers(&code) {
            let lower = ident.to_ascii_lowercase();
            for (word, instead, kept) in SYNONYMS {
                if lower.contains(word) && !kept.contains(&ident) {
                    found.push(format!("{place}: `{ident}` says {word}…; the word is {instead}"));
                }
            }
            for (word, rooms, meaning) in HOMONYMS {
                if lower.contains(word) && !rooms.iter().any(|room| file.starts_with(room)) {
                    found.push(format!("{place}: `{ident}` says {word} outside its rooms ({}): there it means {meaning}", rooms.join(", ")));
                }
            }
        }
        let trimmed = code.trim_start();
        for keyword in ["struct ", "enum ", "trait ", "type "] {
            let declared = trimmed.split_once(keyword).filter(|(before, _)| before.split_whitespace().all(|w| w.starts_with("pub")));
            if let Some((_, rest)) = declared {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if PRELUDE.contains(&name.as_str()) {
                    found.push(format!("{place}: `{name}` shadows the prelude's; name it for what it is"));
                }
            }
        }
    }
    found
}

#[test]
fn identifiers_keep_to_the_words_table() {
    let sources = crate::common::rust_sources();
    let found: Vec<String> = sources.iter().flat_map(|(relative, text)| violations(relative, text)).collect();
    assert!(sources.len() > 50, "read the sources ({} files)", sources.len());
    assert!(found.is_empty(), "identifiers that leave the words table ({}):\n{}", found.len(), found.join("\n"));
}

/// The check itself finds what it must (and passes what is allowed).
#[test]
fn the_check_finds_synonyms_homonyms_and_shadows() {
    let one = |file: &str, line: &str| violations(Path::new(file), line).len();
    assert_eq!(one("fanout/feed.rs", "for subscriber in index.iter() {"), 1);
    assert_eq!(one("watch/session.rs", "let subscriptions = 3;"), 1);
    assert_eq!(one("node/lifecycle.rs", "let closing = self.tasks.shutdown.subscribe();"), 0, "tokio's API");
    assert_eq!(one("store/not_applied.rs", "pub fn journal_from(&self) {"), 1);
    assert_eq!(one("node/sequencer.rs", "let journal_offset = 1;"), 0);
    assert_eq!(one("watch/outlet.rs", "pub struct Outbox;"), 1);
    assert_eq!(one("procedure/outbox.rs", "pub struct OutboxMessage;"), 0);
    assert_eq!(one("partition/handle.rs", "fn publish(&self) {}"), 1);
    assert_eq!(one("node/namespace_options.rs", "let settings = 1;"), 1);
    assert_eq!(one("watch/watches.rs", "pub enum From { Now }"), 1);
    assert_eq!(one("api/sse.rs", "impl From<WatchError> for ApiError {"), 0, "naming the prelude's From is fine");
    assert_eq!(one("fanout/feed.rs", "// a subscriber in a comment, \"subscribers\" in a string"), 0);
    assert_eq!(one("fanout/feed.rs", "let s = \"subscriber\"; let publish = 1;"), 1, "the string is skipped, the identifier is not");
}
