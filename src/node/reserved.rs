//! Tern's own keys: the pks and namespaces only Tern's routes write, and
//! the rule the write path (`write.rs`) checks for every write.
//!
//! A pk that starts with `.` is Tern's: the namespace options and a
//! Firebase database's rules (`.settings`), a Firebase database's tree
//! (`.tree`) and its onDisconnect registrations (`.ondisconnect…`). A
//! namespace whose name starts with `_` is a system namespace (the API
//! keys live in `_tern`). A client's writes (`/v1` puts, deletes and
//! batches) touch none of them; each of Tern's own writers touches only
//! what it owns, so no route can reach another's records: `/v1` cannot
//! replace the Firebase rules, change `write_mode` or plant an
//! onDisconnect registration, and Firebase cannot write a plain record.
//!
//! Reads are not restricted here (grants decide who reads what).

use crate::codec::{Mutation, OpKind};
use crate::tree::TREE_PK;

/// The pk of a namespace's own records (its options, a Firebase database's
/// rules): `.settings`, its name on the wire and in stores.
pub const OPTIONS_PK: &str = ".settings";
/// The sk of the namespace options (`write_mode`): `namespace_options.rs`.
pub const NAMESPACE_OPTIONS_SK: &str = "namespace";
/// The sk of a Firebase database's rules.
pub const RULES_SK: &str = "rules";
/// The pk of a Firebase database's onDisconnect registrations, or (when it
/// does not map to the tree's partition) its first variant `.ondisconnect.N`
/// that does.
pub const ONDISCONNECT_PK: &str = ".ondisconnect";
/// The system namespace that holds the API keys (pk `KEYS_PK`, sk = key
/// id). Its name cannot be a user's (names start with a letter or digit).
pub const SYSTEM_NAMESPACE: &str = "_tern";
/// The pk of the API keys in the system namespace.
pub const KEYS_PK: &str = "keys";

/// Who writes. Each writer owns a set of keys; the rule (`check`) refuses
/// a write that touches any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// A client's records: `/v1` puts, deletes and batches. Never a pk
    /// that starts with `.`, never a system namespace.
    Client,
    /// The namespace options (`PUT /v1/ns/{ns}`): `.settings`/`namespace`.
    NamespaceOptions,
    /// A Firebase database's rules (`PUT /.settings/rules.json`): `.settings`/`rules`.
    FirebaseRules,
    /// A Firebase database's tree (`.tree`, tree operations only) and its
    /// onDisconnect registrations (`.ondisconnect…`).
    FirebaseTree,
    /// The API keys (`/v1/tokens`): `_tern`/`keys`.
    Tokens,
    /// Procedure deployments (an empty pk), ticks and outbox trims.
    Procedures,
}

/// A write that touches a key its writer does not own. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Reserved {
    /// Which op (0 for an entry without ops).
    pub op_index: usize,
    pub message: String,
}

/// What an entry is, as far as the rule is concerned.
pub enum Touches<'a> {
    /// A mutation's operations.
    Mutation(&'a Mutation),
    /// A tick or an outbox trim: no operations, a procedures' entry.
    ProceduresTick,
}

/// Whether `writer` may write `entry` into namespace `ns` (see the module doc).
pub fn check(writer: Writer, ns: &str, entry: Touches<'_>) -> Result<(), Reserved> {
    let mutation = match entry {
        Touches::ProceduresTick if writer == Writer::Procedures => return Ok(()),
        Touches::ProceduresTick => return Err(Reserved { op_index: 0, message: "ticks and outbox trims are written by procedures only".into() }),
        Touches::Mutation(mutation) => mutation,
    };
    for (op_index, op) in mutation.ops.iter().enumerate() {
        let owner = owner_of(ns, &op.pk, &op.sk, &op.kind);
        if owner != Some(writer) {
            return Err(Reserved { op_index, message: refusal(writer, ns, &op.pk, &op.sk, owner) });
        }
    }
    Ok(())
}

/// The writer that owns an op on (`ns`, `pk`, `sk`) of this kind; None when no writer may.
fn owner_of(ns: &str, pk: &str, sk: &str, kind: &OpKind) -> Option<Writer> {
    let plain = matches!(kind, OpKind::Put(_) | OpKind::Delete);
    if let OpKind::Procedure(_) = kind {
        return pk.is_empty().then_some(Writer::Procedures);
    }
    if ns.starts_with('_') {
        return (ns == SYSTEM_NAMESPACE && pk == KEYS_PK && plain).then_some(Writer::Tokens);
    }
    if !pk.starts_with('.') {
        return plain.then_some(Writer::Client);
    }
    match pk {
        OPTIONS_PK if sk == NAMESPACE_OPTIONS_SK && plain => Some(Writer::NamespaceOptions),
        OPTIONS_PK if sk == RULES_SK && plain => Some(Writer::FirebaseRules),
        TREE_PK if matches!(kind, OpKind::Tree(_)) => Some(Writer::FirebaseTree),
        _ if is_ondisconnect_pk(pk) && plain => Some(Writer::FirebaseTree),
        _ => None,
    }
}

/// `.ondisconnect` or one of its variants `.ondisconnect.N`.
pub fn is_ondisconnect_pk(pk: &str) -> bool {
    match pk.strip_prefix(ONDISCONNECT_PK) {
        Some("") => true,
        Some(rest) => rest.strip_prefix('.').is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// What a refused writer is told: whose the key is, and what to do.
fn refusal(writer: Writer, ns: &str, pk: &str, sk: &str, owner: Option<Writer>) -> String {
    if writer != Writer::Client {
        // Tern's own routes build their writes: this is a bug, said plainly.
        return format!("{writer:?} may not write pk {pk:?} sk {sk:?} of namespace {ns:?} (it belongs to {owner:?})");
    }
    if ns.starts_with('_') {
        return format!("namespace {ns:?} is a system namespace: only Tern's own routes write it (API keys: /v1/tokens)");
    }
    let whose = match owner {
        Some(Writer::NamespaceOptions) => "the namespace options: change them with PUT /v1/ns/{ns}",
        Some(Writer::FirebaseRules) => "a Firebase database's rules: write them with PUT /.settings/rules.json",
        Some(Writer::FirebaseTree) => "a Firebase database's tree: write it through Firebase (/{path}.json or the realtime protocol)",
        _ => "reserved for Tern's own records",
    };
    format!("pk {pk:?} is Tern's own ({whose}); a record's pk may not start with '.'")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Op, TreeOp};
    use bytes::Bytes;

    fn one(pk: &str, sk: &str, kind: OpKind) -> Mutation {
        Mutation { ops: vec![Op { pk: pk.into(), sk: sk.into(), kind, condition: None }], ..Default::default() }
    }

    fn put(pk: &str, sk: &str) -> Mutation {
        one(pk, sk, OpKind::Put(Bytes::from_static(b"1")))
    }

    fn tree(sk: &str) -> Mutation {
        one(TREE_PK, sk, OpKind::Tree(TreeOp { merge: false, value: Bytes::from_static(b"1"), time_ms: 0 }))
    }

    #[test]
    fn a_client_writes_plain_records_and_nothing_of_terns() {
        for pk in ["config", "a.b", "x.", "tree", "settings", "x..", "é"] {
            assert!(check(Writer::Client, "app", Touches::Mutation(&put(pk, ""))).is_ok(), "{pk}");
        }
        for (pk, sk) in [
            (".settings", "namespace"),
            (".settings", "rules"),
            (".settings", "x"),
            (".tree", "a"),
            (".ondisconnect", "s"),
            (".ondisconnect.7", "s"),
            (".", ""),
            (".x", ""),
            ("..x", ""),
        ] {
            let refused = check(Writer::Client, "app", Touches::Mutation(&put(pk, sk))).unwrap_err();
            assert!(refused.message.contains("may not start with '.'"), "{pk}: {}", refused.message);
        }
        let refused = check(Writer::Client, SYSTEM_NAMESPACE, Touches::Mutation(&put(KEYS_PK, "k"))).unwrap_err();
        assert!(refused.message.contains("system namespace"), "{}", refused.message);
        assert!(check(Writer::Client, "app", Touches::Mutation(&tree("a"))).is_err(), "a tree op is Firebase's");
        assert!(check(Writer::Client, "app", Touches::ProceduresTick).is_err());
    }

    #[test]
    fn each_of_terns_writers_owns_its_own_keys_only() {
        assert!(check(Writer::NamespaceOptions, "app", Touches::Mutation(&put(OPTIONS_PK, NAMESPACE_OPTIONS_SK))).is_ok());
        assert!(check(Writer::NamespaceOptions, "app", Touches::Mutation(&put(OPTIONS_PK, RULES_SK))).is_err());
        assert!(check(Writer::FirebaseRules, "app", Touches::Mutation(&put(OPTIONS_PK, RULES_SK))).is_ok());
        assert!(check(Writer::FirebaseRules, "app", Touches::Mutation(&put(OPTIONS_PK, NAMESPACE_OPTIONS_SK))).is_err());
        assert!(check(Writer::FirebaseTree, "app", Touches::Mutation(&tree("a/b"))).is_ok());
        assert!(check(Writer::FirebaseTree, "app", Touches::Mutation(&put(TREE_PK, "a"))).is_err(), "the tree takes tree ops only");
        assert!(check(Writer::FirebaseTree, "app", Touches::Mutation(&put(".ondisconnect.12", "s"))).is_ok());
        assert!(check(Writer::FirebaseTree, "app", Touches::Mutation(&put(".ondisconnect.x", "s"))).is_err());
        assert!(check(Writer::FirebaseTree, "app", Touches::Mutation(&put("plain", "s"))).is_err());
        assert!(check(Writer::Tokens, SYSTEM_NAMESPACE, Touches::Mutation(&put(KEYS_PK, "id"))).is_ok());
        assert!(check(Writer::Tokens, SYSTEM_NAMESPACE, Touches::Mutation(&put("other", "id"))).is_err());
        assert!(check(Writer::Tokens, "app", Touches::Mutation(&put(KEYS_PK, "id"))).is_err());
        assert!(check(Writer::Tokens, "_other", Touches::Mutation(&put(KEYS_PK, "id"))).is_err());
        let deploy = one("", "agg", OpKind::Procedure(Bytes::from_static(b"{}")));
        assert!(check(Writer::Procedures, "app", Touches::Mutation(&deploy)).is_ok());
        assert!(check(Writer::Client, "app", Touches::Mutation(&deploy)).is_err());
        assert!(check(Writer::Procedures, "app", Touches::Mutation(&put("plain", ""))).is_err());
        assert!(check(Writer::Procedures, "app", Touches::ProceduresTick).is_ok());
    }

    #[test]
    fn a_refusal_names_the_op() {
        let mut batch = put("a", "");
        batch.ops.push(put(".settings", "rules").ops.remove(0));
        let refused = check(Writer::Client, "app", Touches::Mutation(&batch)).unwrap_err();
        assert_eq!(refused.op_index, 1);
        assert!(refused.message.contains("PUT /.settings/rules.json"), "{}", refused.message);
    }

    #[test]
    fn ondisconnect_variants_are_recognized_exactly() {
        assert!(is_ondisconnect_pk(".ondisconnect"));
        assert!(is_ondisconnect_pk(".ondisconnect.0"));
        assert!(!is_ondisconnect_pk(".ondisconnect."));
        assert!(!is_ondisconnect_pk(".ondisconnectx"));
        assert!(!is_ondisconnect_pk(".ondisconnect.1a"));
    }
}
