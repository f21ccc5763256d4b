//! `Identity`: who a request is from (authentication off, the root token,
//! an API key, a JWT), what it may do (`allows`: its grants decide), and why
//! a token was not accepted (`AuthError`).

use super::jwt::Verified;
use super::keys::Key;
use super::{grant, Denied, Grant, Verb};
use serde_json::{json, Value};
use std::sync::Arc;

/// Who a request is from.
#[derive(Debug, Clone)]
pub enum Identity {
    /// Authentication is off (`tern dev` without `--auth`): anything goes.
    Open,
    /// The root token.
    Root,
    Key(Arc<Key>),
    Jwt(Arc<Verified>),
}

/// Why a token was not accepted. Messages never repeat the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// No token at all.
    Missing,
    /// Something that is no kind of token Tern knows, or one that does not verify.
    Invalid(String),
}

impl AuthError {
    pub fn message(&self) -> String {
        match self {
            AuthError::Missing => "this node requires authentication: send Authorization: Bearer TOKEN".into(),
            AuthError::Invalid(why) => format!("the bearer token is not valid: {why}"),
        }
    }
}

impl Identity {
    /// May this identity do `verb` on the key (`ns`, `pk`)? `pk` "" is the whole namespace.
    pub fn allows(&self, ns: &str, pk: &str, verb: Verb) -> Result<(), Denied> {
        match self {
            Identity::Open | Identity::Root => Ok(()),
            Identity::Key(_) | Identity::Jwt(_) => grant::decide(self.grants(), ns, pk, verb),
        }
    }

    /// May it do `verb` somewhere in `ns`?
    pub fn allows_anywhere(&self, ns: &str, verb: Verb) -> Result<(), Denied> {
        match self {
            Identity::Open | Identity::Root => Ok(()),
            Identity::Key(_) | Identity::Jwt(_) => grant::decide_anywhere(self.grants(), ns, verb),
        }
    }

    /// May it do `verb` on all of a scope (`ns` or `*`, every pk under
    /// `prefix`), carve-outs inside it included (`grant::decide_all_of`)?
    pub fn allows_all_of(&self, ns: &str, prefix: &str, verb: Verb) -> Result<(), Denied> {
        match self {
            Identity::Open | Identity::Root => Ok(()),
            Identity::Key(_) | Identity::Jwt(_) => grant::decide_all_of(self.grants(), ns, prefix, verb),
        }
    }

    /// May it do `verb` on every key of every namespace (`*`, empty prefix)?
    pub fn allows_everywhere(&self, verb: Verb) -> Result<(), Denied> {
        match self {
            Identity::Open | Identity::Root => Ok(()),
            Identity::Key(_) | Identity::Jwt(_) => {
                let everywhere = self.grants().iter().any(|g| g.ns == grant::ANY_NAMESPACE && g.prefix.is_empty() && g.verbs.allows(verb));
                if everywhere {
                    Ok(())
                } else {
                    Err(Denied { message: format!("missing grant: {} on ns=* prefix=\"\" (every namespace)", verb.name()) })
                }
            }
        }
    }

    pub fn grants(&self) -> &[Grant] {
        match self {
            Identity::Open | Identity::Root => &[],
            Identity::Key(key) => &key.record.grants,
            Identity::Jwt(jwt) => &jwt.grants,
        }
    }

    /// Whom this identity's `Idempotency-Key`s are scoped to: its name, or
    /// None without authentication (every caller is then the same one).
    pub fn principal(&self) -> Option<String> {
        match self {
            Identity::Open => None,
            named => Some(named.name()),
        }
    }

    /// `open`, `root`, `key:<id>`, `jwt:<sub>`: for records and logs (never a secret).
    pub fn name(&self) -> String {
        match self {
            Identity::Open => "open".into(),
            Identity::Root => "root".into(),
            Identity::Key(key) => format!("key:{}", key.record.id),
            Identity::Jwt(jwt) => format!("jwt:{}", jwt.subject),
        }
    }

    /// Firebase rules' `auth` for a JWT: `{uid, provider, token}`.
    pub fn firebase_auth(&self) -> Option<Value> {
        match self {
            Identity::Jwt(jwt) => Some(json!({ "uid": jwt.subject, "provider": "custom", "token": jwt.claims })),
            _ => None,
        }
    }
}
