//! The rooms of `src/` and the check that their imports keep to them.
//!
//! `ROOMS` is the one place the map is written: each room (a top-level
//! module, or a sub-room such as `firebase::db`) with the rooms it builds
//! on directly. A room may use what it builds on, and what those build on,
//! down to the foundations — a partial order, so two rooms that need
//! nothing of each other are not stacked for the sake of a list. Nothing
//! else: never a room above, never one beside it (`api` and `firebase`
//! never import each other; `firebase::db` never the edge). `src/lib.rs`
//! declares exactly the top-level rooms (checked too); ARCHITECTURE.md
//! describes each one.
//!
//! The check reads every `.rs` file under `src/` as text and resolves each
//! `crate::…` and `super::…` path (use groups included) to the room it
//! names. Comment lines are skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each room and the rooms it builds on directly, from the top (the
/// process) to the foundations.
const ROOMS: &[(&str, &[&str])] = &[
    ("sim", &["node", "journal", "apply", "procedure", "snapshot"]),
    ("fuzz", &["api", "firebase", "procedure", "snapshot"]),
    ("cli", &["server"]),
    ("server", &["http", "settings"]),
    // The edge: the transport and front, the two protocols, what they share.
    ("http", &["api", "firebase"]),
    ("api", &["edge"]),
    ("firebase", &["edge", "firebase::db"]),
    ("edge", &["auth"]),
    ("settings", &["auth"]),
    // Below the edge.
    ("firebase::db", &["cluster", "firebase::rules"]),
    ("firebase::rules", &["tree"]),
    ("auth", &["cluster"]),
    ("cluster", &["node"]),
    ("node", &["journal", "watch"]),
    ("journal", &["codec", "log"]),
    ("watch", &["apply"]),
    ("apply", &["procedure", "partition", "snapshot"]),
    ("procedure", &["codec", "log", "store"]),
    ("partition", &["fanout", "log", "position"]),
    ("fanout", &["codec", "store", "position", "prefetch", "metrics"]),
    ("snapshot", &["store", "metrics", "identity"]),
    ("log", &["limits", "metrics", "identity"]),
    ("store", &["tree"]),
    ("codec", &["tree", "partitioner"]),
    ("tree", &["limits"]),
    ("position", &["limits"]),
    ("limits", &[]),
    ("identity", &[]),
    ("partitioner", &[]),
    ("metrics", &[]),
    ("prefetch", &[]),
];

/// Rooms are named by at most this many leading path segments (`firebase::db`).
const ROOM_DEPTH_MAX: usize = 2;

/// The room a module path is in: the longest prefix that names a room.
fn room_of(path: &[String]) -> Option<&'static str> {
    (1..=path.len().min(ROOM_DEPTH_MAX)).rev().find_map(|depth| {
        let name = path[..depth].join("::");
        ROOMS.iter().map(|(room, _)| *room).find(|room| *room == name)
    })
}

/// Every room `room` may use: what it builds on, transitively.
fn below(room: &str) -> BTreeSet<&'static str> {
    let direct: BTreeMap<&str, &[&str]> = ROOMS.iter().copied().collect();
    let mut found = BTreeSet::new();
    let mut stack: Vec<&str> = direct.get(room).map(|d| d.to_vec()).unwrap_or_default();
    while let Some(next) = stack.pop() {
        let Some((name, deps)) = ROOMS.iter().find(|(name, _)| *name == next) else { continue };
        if found.insert(*name) {
            stack.extend(deps.iter().copied());
        }
    }
    found
}

/// A source file's module path below the crate: `src/a/b.rs` and
/// `src/a/b/mod.rs` are `["a", "b"]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The paths a use tree at the start of `text` names, each after `prefix`:
/// `a::b`, `a::{b, c::d}`, `{a, b::{c, self}}`.
fn expand(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            for item in group_items(group) {
                match item.trim() {
                    "" | "self" => out.push(path.clone()),
                    item => expand(item, path.clone(), out),
                }
            }
            return;
        }
        let name = ident(rest);
        if name.is_empty() {
            break;
        }
        path.push(name.to_string());
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => break,
        }
    }
    out.push(path);
}

/// The items of a `{…}` group that starts at `text` (just after the `{`),
/// split at its own commas.
fn group_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

/// The module paths one line of `module`'s source refers to (`crate::…`,
/// and `super::…` that climbs out of the file's module).
fn targets(module: &[String], line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let preceded = |before: &str| before.chars().last().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    let mut at = 0;
    while let Some(found) = line[at..].find("crate::") {
        let start = at + found;
        // `tern_crate::x` or `x::crate::…` are not crate paths.
        if !preceded(&line[..start]) {
            expand(&line[start + "crate::".len()..], Vec::new(), &mut out);
        }
        at = start + "crate::".len();
    }
    let mut at = 0;
    while let Some(found) = line[at..].find("super::") {
        let start = at + found;
        let mut chain = &line[start..];
        let mut ups = 0;
        while let Some(next) = chain.strip_prefix("super::") {
            ups += 1;
            chain = next;
        }
        if !preceded(&line[..start]) && ups <= module.len() {
            expand(chain, module[..module.len() - ups].to_vec(), &mut out);
        }
        at = start + "super::".len() * ups;
    }
    out.retain(|path| !path.is_empty());
    out
}

/// Every import of `source` (the text of the file at `relative`, under
/// `src/`) that leaves its room for one it may not use, as `file:line: message`.
fn violations(relative: &Path, source: &str) -> Vec<String> {
    let module = module_path(relative);
    let Some(own) = room_of(&module) else {
        return vec![format!("{}: module {:?} is in no room: add it to ROOMS in tests/it/layers.rs", relative.display(), module.join("::"))];
    };
    let allowed = below(own);
    let mut found = Vec::new();
    for (number, line) in source.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for target in targets(&module, line) {
            let place = format!("{}:{}", relative.display(), number + 1);
            match room_of(&target) {
                // A path inside the crate root that names no room (a macro, a
                // re-export of lib.rs): not an arrow between rooms.
                None if target.len() == 1 && !module.is_empty() => {}
                None => found.push(format!("{place}: `{}` is in no room: add it to ROOMS in tests/it/layers.rs", target.join("::"))),
                Some(room) if room == own || allowed.contains(room) => {}
                Some(room) => {
                    let relation = if below(room).contains(own) { "a room above it" } else { "a room it does not build on" };
                    found.push(format!("{place}: `{own}` imports `{room}`, {relation}"));
                }
            }
        }
    }
    found
}

#[test]
fn imports_keep_to_the_rooms() {
    let sources = crate::common::rust_sources();
    let mut found = Vec::new();
    for (relative, text) in &sources {
        if relative == Path::new("lib.rs") || relative == Path::new("main.rs") {
            continue;
        }
        found.extend(violations(relative, text));
    }
    assert!(sources.len() > 50, "read the sources ({} files)", sources.len());
    assert!(found.is_empty(), "imports that leave their room ({}):\n{}", found.len(), found.join("\n"));
}

/// The map is a partial order: no room builds on itself, through any path,
/// and every room it names is in it.
#[test]
fn the_rooms_form_no_circle() {
    for (room, deps) in ROOMS {
        for dep in *deps {
            assert!(ROOMS.iter().any(|(name, _)| name == dep), "{room} builds on {dep}, which is no room");
        }
        assert!(!below(room).contains(room), "{room} builds on itself");
    }
    let names: BTreeSet<&str> = ROOMS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names.len(), ROOMS.len(), "each room is listed once");
}

/// `src/lib.rs` declares exactly the top-level rooms, and every sub-room is
/// a directory of its room.
#[test]
fn lib_rs_declares_the_rooms() {
    let checkout = crate::common::checkout();
    let lib = std::fs::read_to_string(checkout.join("src/lib.rs")).expect("src/lib.rs");
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("pub(crate) mod ")).or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';'))
        })
        .collect();
    let top: BTreeSet<&str> = ROOMS.iter().map(|(name, _)| *name).filter(|name| !name.contains("::")).collect();
    assert_eq!(declared, top, "src/lib.rs declares exactly the top-level rooms of ROOMS");
    for (room, _) in ROOMS.iter().filter(|(name, _)| name.contains("::")) {
        let dir = checkout.join("src").join(room.replace("::", "/"));
        assert!(dir.is_dir(), "sub-room {room} is the directory {}", dir.display());
    }
}

/// The check itself fails on what it must catch (and passes what is allowed).
#[test]
fn the_check_catches_imports_that_leave_their_room() {
    let up = violations(Path::new("store/mod.rs"), "use crate::api::AppState;\n");
    assert_eq!(up, ["store/mod.rs:1: `store` imports `api`, a room above it"]);
    let grouped = violations(Path::new("apply/mod.rs"), "use crate::{log::Log, watch::Session};\n");
    assert_eq!(grouped, ["apply/mod.rs:1: `apply` imports `watch`, a room above it"]);
    let beside = violations(Path::new("store/key.rs"), "    let x = crate::log::LogError::Closed;\n");
    assert_eq!(beside, ["store/key.rs:1: `store` imports `log`, a room it does not build on"]);
    let climbing = violations(Path::new("node.rs"), "use super::api::AppState;\n");
    assert_eq!(climbing, ["node.rs:1: `node` imports `api`, a room above it"]);
    // The protocols never import each other, and Firebase's database never the edge.
    assert_eq!(violations(Path::new("api/records.rs"), "use crate::firebase::FbError;\n").len(), 1);
    assert_eq!(violations(Path::new("firebase/rest.rs"), "use crate::api::render;\n").len(), 1);
    assert_eq!(violations(Path::new("firebase/db/indexes.rs"), "use crate::edge::ApiError;\n").len(), 1);
    assert_eq!(violations(Path::new("firebase/db/indexes.rs"), "use super::super::stream::Translator;\n").len(), 1, "climbing out of a sub-room");
    assert_eq!(violations(Path::new("firebase/db/indexes.rs"), "use crate::firebase::{rules::Rules, error::FbError};\n").len(), 1, "a nested group");
    assert!(violations(Path::new("firebase/rest.rs"), "use super::db::{tree_view, TreeData};\nuse crate::edge::{to_holder, Incoming};\n").is_empty());
    assert!(violations(Path::new("http/h2c/connection.rs"), "use crate::{api, firebase};\nuse super::watches::Watches;\n").is_empty());
    assert!(violations(Path::new("node/mod.rs"), "use crate::{apply::{self, ApplyConfig}, partition::Namespace};\n").is_empty());
    assert!(violations(Path::new("fanout/feed.rs"), "// crate::api is mentioned in a comment\nuse super::queue::Batch;\n").is_empty());
    assert_eq!(violations(Path::new("nowhere/x.rs"), "").len(), 1, "a module in no room is reported");
}

/// The one file above the log that appends to it (`node::write::append`),
/// and to the journal (a journaled write is a write too).
const WRITE_PATH: &str = "node/write.rs";

/// Where a line appends to the log or the journal other than through the
/// write path: a call of `append` on something named `log` or `journal`
/// (`self.log.append(`, `node.log.as_ref().append(`, `log().append(`), or
/// `Log::append` named as a function. The log's and the journal's own
/// code, and the simulation's fault-injecting log, are below the write path.
fn appends_outside_the_write_path(relative: &Path, source: &str) -> Vec<String> {
    let file = relative.to_string_lossy().replace('\\', "/");
    let below = ["log/", "journal/", "sim/"];
    if file == WRITE_PATH || below.iter().any(|prefix| file.starts_with(prefix)) {
        return Vec::new();
    }
    let call = regex::Regex::new(r"\b(log|journal)(\(\))?(\.as_ref\(\))?\s*\.\s*append\s*\(|Log::append\b").expect("a valid pattern");
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//") && call.is_match(line))
        .map(|(number, line)| format!("{file}:{}: appends outside {WRITE_PATH}: {}", number + 1, line.trim()))
        .collect()
}

/// Every write goes through `Node::write` (`node/write.rs`), where the
/// reserved-key rule, the log's size limit, durability and ripcord are decided.
#[test]
fn nothing_but_the_write_path_appends_to_the_log() {
    let sources = crate::common::rust_sources();
    let found: Vec<String> = sources.iter().flat_map(|(relative, text)| appends_outside_the_write_path(relative, text)).collect();
    assert!(found.is_empty(), "appends to the log outside the write path ({}):\n{}", found.len(), found.join("\n"));
    let write_path = sources.iter().find(|(relative, _)| relative == Path::new(WRITE_PATH)).expect("the write path exists");
    assert!(write_path.1.contains("log.append("), "{WRITE_PATH} is where the log is appended to");
}

/// The check finds what it must (and passes what is allowed).
#[test]
fn the_write_path_check_catches_appends_elsewhere() {
    for line in
        ["self.log.append(&tp, payload).await", "state.node.log.as_ref().append(&tp, p)", "node.journal.append(ns, 1, 0, &m)", "let f = Log::append;"]
    {
        assert_eq!(appends_outside_the_write_path(Path::new("api/records.rs"), line).len(), 1, "{line}");
    }
    assert!(appends_outside_the_write_path(Path::new(WRITE_PATH), "log.append(tp, payload)").is_empty());
    assert!(appends_outside_the_write_path(Path::new("log/embedded/mod.rs"), "self.log.append(x)").is_empty());
    for line in ["handle.feed.append(events, 1);", "// log.append( in a comment", "out.append(&mut more);", "catalog.append(x)"] {
        assert!(appends_outside_the_write_path(Path::new("apply/mod.rs"), line).is_empty(), "{line}");
    }
}
