//! Grants: what an identity may do, per namespace, per pk prefix and per
//! verb — etcd's roles and Consul's ACLs in one small rule:
//!
//! - **deny by default**: a request no grant covers is refused;
//! - **the most specific grant wins**: of the grants that cover a key
//!   (`ns` equal to the namespace or `*`, `prefix` a prefix of the pk), the
//!   one naming the namespace beats `*`, then the longest prefix; its verbs
//!   alone decide. So `{ns: app, prefix: "", verbs: [read, write]}` with
//!   `{ns: app, prefix: "secrets/", verbs: []}` reads and writes all of
//!   `app` but `secrets/…`.
//! - `admin` holds every other verb (an admin of a scope may mint a token
//!   with any verb in it anyway) and manages the scope: namespaces, tokens.
//! - `*` never covers a system namespace (a name starting with `_`): only
//!   the root token (the admin token file's) sees those.

use serde::{Deserialize, Serialize};

/// Most grants one token carries: every request walks them.
pub const GRANTS_PER_TOKEN_MAX: usize = 64;
/// Longest pk prefix a grant names (a pk's own bound).
pub const GRANT_PREFIX_BYTES_MAX: usize = crate::limits::PK_BYTES_MAX;

/// One verb a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Read,
    Write,
    Watch,
    Admin,
}

impl Verb {
    pub const ALL: [Verb; 4] = [Verb::Read, Verb::Write, Verb::Watch, Verb::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Write => "write",
            Verb::Watch => "watch",
            Verb::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Result<Verb, String> {
        Verb::ALL.into_iter().find(|v| v.name() == text).ok_or_else(|| format!("unknown verb {text:?}: use read, write, watch or admin"))
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of verbs (a bit each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verbs(u8);

impl Verbs {
    pub fn of(verbs: &[Verb]) -> Verbs {
        Verbs(verbs.iter().fold(0, |bits, v| bits | v.bit()))
    }

    /// Whether `verb` is allowed: named, or implied by `admin`.
    pub fn allows(self, verb: Verb) -> bool {
        self.0 & (verb.bit() | Verb::Admin.bit()) != 0
    }

    pub fn list(self) -> Vec<Verb> {
        Verb::ALL.into_iter().filter(|v| self.0 & v.bit() != 0).collect()
    }
}

impl Serialize for Verbs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.list().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Verbs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Verbs::of(&Vec::<Verb>::deserialize(deserializer)?))
    }
}

/// Allows `verbs` on the keys of namespace `ns` (or `*`: every namespace
/// but the system ones) whose pk starts with `prefix` (empty: every pk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub ns: String,
    #[serde(default)]
    pub prefix: String,
    pub verbs: Verbs,
}

/// The wildcard namespace.
pub const ANY_NAMESPACE: &str = "*";

/// Whether `ns` is a system namespace (never covered by `*`).
pub fn is_system_namespace(ns: &str) -> bool {
    ns.starts_with('_')
}

impl Grant {
    /// Checks a grant asked for (a token being created, a JWT's claim).
    pub fn check(&self) -> Result<(), String> {
        if self.ns != ANY_NAMESPACE {
            crate::limits::check_namespace_name(&self.ns).map_err(|e| e.message)?;
        }
        if self.prefix.len() > GRANT_PREFIX_BYTES_MAX {
            return Err(format!("a grant's prefix is at most {GRANT_PREFIX_BYTES_MAX} bytes; got {}", self.prefix.len()));
        }
        Ok(())
    }

    /// Whether this grant covers the key (`ns`, `pk`); `pk` None: the whole namespace.
    fn covers(&self, ns: &str, pk: &str) -> bool {
        let ns_matches = self.ns == ns || (self.ns == ANY_NAMESPACE && !is_system_namespace(ns));
        ns_matches && pk.starts_with(self.prefix.as_str())
    }

    /// How specific: naming the namespace beats `*`, then the longer prefix.
    fn specificity(&self) -> (bool, usize) {
        (self.ns != ANY_NAMESPACE, self.prefix.len())
    }

    /// `ns=NS prefix=P`, for messages.
    pub fn scope(&self) -> String {
        format!("ns={} prefix={:?}", self.ns, self.prefix)
    }
}

/// Why a request was refused: the grant it lacks, for the 403's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub message: String,
}

/// Decides `verb` on (`ns`, `pk`) for `grants` (see the module doc). The
/// whole namespace (`pk` = "") is covered only by grants with an empty prefix.
pub fn decide(grants: &[Grant], ns: &str, pk: &str, verb: Verb) -> Result<(), Denied> {
    let winner = grants.iter().filter(|g| g.covers(ns, pk)).max_by_key(|g| g.specificity());
    match winner {
        Some(grant) if grant.verbs.allows(verb) => Ok(()),
        Some(grant) => Err(Denied {
            message: format!(
                "missing grant: {} on ns={ns} pk={pk:?}; the most specific grant that covers it ({}) allows only [{}]",
                verb.name(),
                grant.scope(),
                grant.verbs.list().iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
            ),
        }),
        None => Err(Denied { message: missing(verb, ns, pk) }),
    }
}

/// Decides `verb` somewhere in namespace `ns`: some grant on it allows it
/// (describing a namespace, listing the namespaces one may use).
pub fn decide_anywhere(grants: &[Grant], ns: &str, verb: Verb) -> Result<(), Denied> {
    let any = grants.iter().any(|g| (g.ns == ns || (g.ns == ANY_NAMESPACE && !is_system_namespace(ns))) && g.verbs.allows(verb));
    if any {
        Ok(())
    } else {
        Err(Denied { message: format!("missing grant: {} on ns={ns} (no grant of this token covers any of it)", verb.name()) })
    }
}

/// Decides `verb` on *all* of a scope: namespace `ns` (or `*`: every
/// namespace but the system ones) and every pk starting with `prefix` —
/// what a token minted with that grant could reach. The decision of
/// `decide` changes only where a grant's scope begins, so it is taken at
/// the scope's start and at each of `grants`' prefixes inside it, in the
/// scope's namespace (for `*`: in each namespace a grant names, and in
/// any other, which the `*` key stands for). A carve-out inside the scope
/// (`{app, secrets/, []}` under `{app, "", [admin]}`) refuses the whole
/// scope. At most `GRANTS_PER_TOKEN_MAX`² decisions.
pub fn decide_all_of(grants: &[Grant], ns: &str, prefix: &str, verb: Verb) -> Result<(), Denied> {
    let namespaces: Vec<&str> = match ns {
        ANY_NAMESPACE => grants.iter().map(|g| g.ns.as_str()).filter(|n| !is_system_namespace(n)).chain([ANY_NAMESPACE]).collect(),
        named => vec![named],
    };
    let starts = grants.iter().map(|g| g.prefix.as_str()).filter(|p| p.starts_with(prefix)).chain([prefix]);
    for namespace in &namespaces {
        for start in starts.clone() {
            if let Err(denied) = decide(grants, namespace, start, verb) {
                let within = match *namespace {
                    ANY_NAMESPACE => "namespaces no grant names".to_string(),
                    named => format!("ns={named} pk={start:?}"),
                };
                return Err(Denied {
                    message: format!("missing grant: {} on all of ns={ns} prefix={prefix:?}: refused at {within} ({})", verb.name(), denied.message),
                });
            }
        }
    }
    Ok(())
}

fn missing(verb: Verb, ns: &str, pk: &str) -> String {
    if pk.is_empty() {
        format!("missing grant: {} on all of ns={ns} (a grant with an empty prefix)", verb.name())
    } else {
        format!("missing grant: {} on ns={ns} pk={pk:?}", verb.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(ns: &str, prefix: &str, verbs: &[Verb]) -> Grant {
        Grant { ns: ns.into(), prefix: prefix.into(), verbs: Verbs::of(verbs) }
    }

    #[test]
    fn all_of_a_scope_is_refused_when_a_carve_out_inside_it_refuses() {
        let carved = [grant("app", "", &[Verb::Admin]), grant("app", "secrets/", &[])];
        // Before the fix, minting {app, "", admin} needed only admin on app's
        // start, so the minted key reached secrets/.
        let refused = decide_all_of(&carved, "app", "", Verb::Admin).unwrap_err();
        assert!(refused.message.contains("pk=\"secrets/\""), "{}", refused.message);
        assert!(decide_all_of(&carved, "app", "public/", Verb::Admin).is_ok(), "a scope beside the carve-out");
        assert!(decide_all_of(&carved, "app", "secrets/x", Verb::Admin).is_err(), "a scope inside it");
        assert!(decide_all_of(&carved, "app", "secrets", Verb::Admin).is_err(), "a scope holding it");
        // A carve-out with a hole back in it still refuses the whole.
        let holed = [grant("app", "", &[Verb::Admin]), grant("app", "s/", &[Verb::Read]), grant("app", "s/ok", &[Verb::Admin])];
        assert!(decide_all_of(&holed, "app", "", Verb::Admin).is_err());
        assert!(decide_all_of(&holed, "app", "s/ok", Verb::Admin).is_ok());
        // `*` against named namespaces: a named grant without admin refuses `*`.
        let star = [grant("*", "", &[Verb::Admin]), grant("billing", "", &[Verb::Read])];
        assert!(decide_all_of(&star, "*", "", Verb::Admin).is_err());
        assert!(decide_all_of(&star, "app", "", Verb::Admin).is_ok());
        assert!(decide_all_of(&star, "billing", "x", Verb::Admin).is_err());
        let star_carved = [grant("*", "", &[Verb::Admin]), grant("*", "private/", &[])];
        assert!(decide_all_of(&star_carved, "*", "", Verb::Admin).is_err());
        assert!(decide_all_of(&star_carved, "app", "", Verb::Admin).is_err(), "the * carve-out reaches into app");
        assert!(decide_all_of(&[grant("*", "", &[Verb::Admin])], "*", "", Verb::Admin).is_ok());
        // A named namespace's admin is not `*`'s; system namespaces are never in `*`.
        assert!(decide_all_of(&[grant("app", "", &[Verb::Admin])], "*", "", Verb::Admin).is_err());
        assert!(decide_all_of(&[grant("*", "", &[Verb::Admin]), grant("_tern", "", &[])], "*", "", Verb::Admin).is_ok());
    }

    #[test]
    fn deny_by_default() {
        assert!(decide(&[], "app", "k", Verb::Read).is_err());
        let grants = [grant("other", "", &[Verb::Read])];
        assert!(decide(&grants, "app", "k", Verb::Read).is_err());
    }

    #[test]
    fn the_most_specific_grant_wins() {
        let grants = [
            grant("*", "", &[Verb::Read]),
            grant("app", "", &[Verb::Read, Verb::Write]),
            grant("app", "secrets/", &[]),
            grant("app", "secrets/public", &[Verb::Read]),
        ];
        assert!(decide(&grants, "app", "k", Verb::Write).is_ok());
        assert!(decide(&grants, "other", "k", Verb::Read).is_ok());
        assert!(decide(&grants, "other", "k", Verb::Write).is_err());
        let denied = decide(&grants, "app", "secrets/db", Verb::Read).unwrap_err();
        assert!(denied.message.contains("prefix=\"secrets/\""), "{}", denied.message);
        assert!(decide(&grants, "app", "secrets/public-key", Verb::Read).is_ok());
        assert!(decide(&grants, "app", "secrets/public-key", Verb::Write).is_err());
    }

    #[test]
    fn a_namespace_wide_request_needs_an_empty_prefix() {
        let grants = [grant("app", "users/", &[Verb::Watch])];
        assert!(decide(&grants, "app", "users/1", Verb::Watch).is_ok());
        assert!(decide(&grants, "app", "", Verb::Watch).is_err());
        assert!(decide_anywhere(&grants, "app", Verb::Watch).is_ok());
        assert!(decide_anywhere(&grants, "app", Verb::Read).is_err());
    }

    #[test]
    fn admin_implies_the_other_verbs() {
        let grants = [grant("app", "", &[Verb::Admin])];
        for verb in Verb::ALL {
            assert!(decide(&grants, "app", "x", verb).is_ok());
        }
    }

    #[test]
    fn the_wildcard_never_covers_a_system_namespace() {
        let grants = [grant("*", "", &[Verb::Admin])];
        assert!(decide(&grants, "_tern", "keys", Verb::Read).is_err());
        assert!(decide_anywhere(&grants, "_tern", Verb::Read).is_err());
    }

    #[test]
    fn grants_are_checked_and_round_trip_as_json() {
        let g: Grant = serde_json::from_str(r#"{"ns":"app","prefix":"a/","verbs":["read","watch"]}"#).unwrap();
        assert_eq!(g.verbs.list(), vec![Verb::Read, Verb::Watch]);
        assert_eq!(serde_json::to_value(&g).unwrap()["verbs"], serde_json::json!(["read", "watch"]));
        assert!(serde_json::from_str::<Grant>(r#"{"ns":"app","verbs":["delete"]}"#).is_err());
        assert!(grant("bad name", "", &[Verb::Read]).check().is_err());
        assert!(grant("app", &"x".repeat(GRANT_PREFIX_BYTES_MAX + 1), &[Verb::Read]).check().is_err());
        assert!(grant("*", "", &[Verb::Read]).check().is_ok());
    }
}
