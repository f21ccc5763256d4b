//! The floors of `src/`, and the check that imports only point down.
//!
//! `FLOORS` is the one place the allowed arrows are written: a module may
//! use modules of the floors below its own, never a sibling on its own
//! floor, never one above. `src/lib.rs` declares the modules in this order
//! (checked too), and ARCHITECTURE.md describes each floor.
//!
//! The check reads every `.rs` file under `src/` as text and resolves each
//! `crate::x`, `crate::{x, y}` and `super::…::x` path that leaves the
//! file's own top-level module. Comment lines are skipped.

use std::collections::BTreeSet;
use std::path::Path;

/// Top to bottom. A module's floor is its index here.
const FLOORS: &[&[&str]] = &[
    &["sim"],
    &["cli"],
    &["server"],
    &["api", "settings"],
    &["rules", "auth"],
    &["cluster"],
    &["node"],
    &["journal"],
    &["watch"],
    &["apply"],
    &["procedure"],
    &["partition"],
    &["fanout", "snapshot"],
    &["log", "store", "codec"],
    &["tree"],
    &["position"],
    &["limits", "partitioner", "metrics", "prefetch"],
];

/// Inside `api`: the transport (`api/http/`) sits above the handlers; a
/// handler never reaches up into it.
const API_TRANSPORT: &str = "http";

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
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

/// The first path segment of each item of a `{a, b::c, self}` group that
/// starts at `text` (just after the `{`).
fn group_heads(text: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_item_start = true;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item_start = true,
            c if c.is_whitespace() => {}
            _ if at_item_start && depth == 0 => {
                heads.push(ident(&text[i..]));
                at_item_start = false;
            }
            _ => {}
        }
    }
    heads.into_iter().filter(|h| !h.is_empty()).collect()
}

/// The crate-level modules one line of `module`'s source refers to.
fn targets(module: &[String], line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        // `tern_crate::x` or `self.crate::…` are not crate paths.
        let preceded = rest[..at].chars().last().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !preceded {
            match after.strip_prefix('{') {
                Some(group) => out.extend(group_heads(group).into_iter().map(str::to_string)),
                None => out.push(ident(after).to_string()),
            }
        }
        rest = after;
    }
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        let preceded = rest[..at].chars().last().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let mut chain = &rest[at..];
        let mut ups = 0;
        while let Some(next) = chain.strip_prefix("super::") {
            ups += 1;
            chain = next;
        }
        // Only a chain that climbs out of the file's top-level module names another one.
        if !preceded && ups >= module.len() {
            match chain.strip_prefix('{') {
                Some(group) => out.extend(group_heads(group).into_iter().map(str::to_string)),
                None => out.push(ident(chain).to_string()),
            }
        }
        rest = &rest[at + "super::".len() * ups..];
    }
    out.retain(|t| !t.is_empty() && t != "self" && t != "super");
    out
}

/// Whether a line of a handler file reaches the API's transport.
fn reaches_api_transport(line: &str) -> bool {
    [format!("crate::api::{API_TRANSPORT}"), format!("super::{API_TRANSPORT}::"), format!("super::{API_TRANSPORT};")]
        .iter()
        .any(|pattern| line.contains(pattern.as_str()))
}

/// Every arrow of `source` (the text of the file at `relative`, under
/// `src/`) that breaks the floors, as `file:line: message`.
fn violations(relative: &Path, source: &str) -> Vec<String> {
    let module = module_path(relative);
    let Some(own) = module.first() else { return Vec::new() };
    let Some(own_floor) = floor_of(own) else {
        return vec![format!("{}: module {own:?} is on no floor: add it to FLOORS in tests/it/layers.rs", relative.display())];
    };
    let is_handler = own == "api" && module.get(1).is_none_or(|second| second != API_TRANSPORT);
    let mut found = Vec::new();
    for (number, line) in source.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let place = format!("{}:{}", relative.display(), number + 1);
        for target in targets(&module, line) {
            if target == *own {
                continue;
            }
            match floor_of(&target) {
                None => found.push(format!("{place}: `{target}` is on no floor: add it to FLOORS in tests/it/layers.rs")),
                Some(floor) if floor <= own_floor => {
                    let relation = if floor == own_floor { "a sibling on its own floor" } else { "a higher floor" };
                    found.push(format!("{place}: `{own}` imports `{target}`, {relation}"));
                }
                Some(_) => {}
            }
        }
        if is_handler && reaches_api_transport(line) {
            found.push(format!("{place}: an API handler reaches up into `api::{API_TRANSPORT}` (the transport above it)"));
        }
    }
    found
}

#[test]
fn imports_only_point_down() {
    let sources = crate::common::rust_sources();
    let mut found = Vec::new();
    for (relative, text) in &sources {
        if relative == Path::new("lib.rs") || relative == Path::new("main.rs") {
            continue;
        }
        found.extend(violations(relative, text));
    }
    assert!(sources.len() > 50, "read the sources ({} files)", sources.len());
    assert!(found.is_empty(), "imports that do not point down ({}):\n{}", found.len(), found.join("\n"));
}

#[test]
fn lib_rs_declares_the_floors_in_order() {
    let lib = std::fs::read_to_string(crate::common::checkout().join("src/lib.rs")).expect("src/lib.rs");
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("pub(crate) mod ")).or_else(|| line.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';'))
        })
        .collect();
    let floors: Vec<&str> = FLOORS.iter().flat_map(|floor| floor.iter().copied()).collect();
    assert_eq!(
        declared.iter().copied().collect::<BTreeSet<_>>(),
        floors.iter().copied().collect::<BTreeSet<_>>(),
        "src/lib.rs declares exactly the modules of FLOORS"
    );
    let ranks: Vec<usize> = declared.iter().map(|m| floor_of(m).expect("on a floor")).collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "src/lib.rs lists its modules top floor first: {declared:?}");
}

/// The check itself fails on what it must catch (and passes what is allowed).
#[test]
fn the_check_catches_arrows_that_point_up() {
    let up = violations(Path::new("store/mod.rs"), "use crate::api::AppState;\n");
    assert_eq!(up, ["store/mod.rs:1: `store` imports `api`, a higher floor"]);
    let grouped = violations(Path::new("apply/mod.rs"), "use crate::{log::Log, watch::Session};\n");
    assert_eq!(grouped, ["apply/mod.rs:1: `apply` imports `watch`, a higher floor"]);
    let sibling = violations(Path::new("store/key.rs"), "    let x = crate::log::LogError::Closed;\n");
    assert_eq!(sibling, ["store/key.rs:1: `store` imports `log`, a sibling on its own floor"]);
    let climbing = violations(Path::new("node.rs"), "use super::api::AppState;\n");
    assert_eq!(climbing, ["node.rs:1: `node` imports `api`, a higher floor"]);
    let handler = violations(Path::new("api/records.rs"), "use super::http::listener::serve;\n");
    assert_eq!(handler.len(), 1, "{handler:?}");
    assert!(violations(Path::new("api/http/h2c/mod.rs"), "use crate::api::{sse, AppState};\nuse super::listener;\n").is_empty());
    assert!(violations(Path::new("node/mod.rs"), "use crate::{apply::{self, ApplyConfig}, partition::Namespace};\n").is_empty());
    assert!(violations(Path::new("fanout/feed.rs"), "// crate::api is mentioned in a comment\nuse super::queue::Batch;\n").is_empty());
    assert_eq!(violations(Path::new("nowhere/x.rs"), "").len(), 1, "a module on no floor is reported");
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
    for line in ["self.log.append(&tp, payload).await", "state.node.log.as_ref().append(&tp, p)", "node.journal.append(ns, 1, 0, &m)", "let f = Log::append;"] {
        assert_eq!(appends_outside_the_write_path(Path::new("api/records.rs"), line).len(), 1, "{line}");
    }
    assert!(appends_outside_the_write_path(Path::new(WRITE_PATH), "log.append(tp, payload)").is_empty());
    assert!(appends_outside_the_write_path(Path::new("log/embedded/mod.rs"), "self.log.append(x)").is_empty());
    for line in ["handle.feed.append(events, 1);", "// log.append( in a comment", "out.append(&mut more);", "catalog.append(x)"] {
        assert!(appends_outside_the_write_path(Path::new("apply/mod.rs"), line).is_empty(), "{line}");
    }
}
