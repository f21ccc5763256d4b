//! Who is asking, decided in one place (`caller`): with Tern's
//! authentication on, a token whose grants allow the verb on the tree is
//! the owner and other JWTs are users whose claims are `auth`; without it,
//! the owner token is the admin (`auth_variable_override` sets the `auth`
//! rules see), in emulator mode an unsigned ID token's claims become
//! `auth`, and anyone else is `auth = null` (`legacy_caller`).

use axum::http::{header, HeaderMap, StatusCode};
use serde_json::Value;

use super::error::FbError;
use super::query::Query;
use super::state::FirebaseConfig;
use crate::auth::{Identity, Verb};
use crate::codec::now_ms;
use crate::tree::TREE_PK;

/// Who is asking.
#[derive(Debug, Clone)]
pub(super) enum Caller {
    /// The owner: rules do not apply, unless it asked to be seen as `auth`
    /// (`auth_variable_override`).
    Admin { as_auth: Option<Value> },
    /// Anyone else: rules apply with this `auth` (null: signed out).
    User { auth: Value },
}

impl Caller {
    /// The `auth` rules see, or None when rules do not apply.
    pub(super) fn rules_auth(&self) -> Option<&Value> {
        match self {
            Caller::Admin { as_auth: None } => None,
            Caller::Admin { as_auth: Some(auth) } | Caller::User { auth } => Some(auth),
        }
    }

    /// Whom the caller's `Idempotency-Key`s are scoped to (`edge::scoped_write_id`):
    /// the owner (everyone who may bypass the rules is one writer), a user
    /// by uid; a signed-out caller by nobody (all of them are one).
    pub(super) fn principal(&self) -> Option<String> {
        match self {
            Caller::Admin { .. } => Some("firebase:owner".into()),
            Caller::User { auth } => auth.get("uid").and_then(Value::as_str).map(|uid| format!("firebase:uid:{uid}")),
        }
    }

    /// Whether the caller's credential has expired by `now_ms` (its
    /// token's `exp`, in seconds; a credential without one never expires).
    /// A stream then ends with `auth_revoked`.
    pub(super) fn expired(&self, now_ms: u64) -> bool {
        match self {
            // The SDKs' emulator tokens (`mockUserToken`) claim to be issued
            // at the epoch and expire an hour later; the emulator takes them
            // as never expiring, so do we (a verified JWT's `exp` was
            // checked when it was verified, and is looked at here too).
            Caller::User { auth } if auth.pointer("/token/iat").and_then(Value::as_f64) == Some(0.0) => false,
            Caller::User { auth } => auth.pointer("/token/exp").and_then(Value::as_f64).is_some_and(|exp| exp * 1000.0 <= now_ms as f64),
            Caller::Admin { .. } => false,
        }
    }
}

/// Who is asking. With authentication on (`identity` is the request's): the
/// root token, and a token whose grants allow `verb` on the database's tree,
/// are the owner (rules do not apply, like the Admin SDK's service account);
/// a JWT without such a grant is a user whose claims are `auth` (rules
/// decide); an API key without one is refused (403). Without
/// authentication: `legacy_caller`.
pub(super) fn caller(
    config: &FirebaseConfig,
    identity: Option<&Identity>,
    headers: &HeaderMap,
    query: &Query,
    verb: Verb,
) -> Result<Caller, FbError> {
    let Some(identity) = identity else { return legacy_caller(config, headers, query) };
    let ns = query.get("ns").unwrap_or("default");
    let as_admin = || -> Result<Caller, FbError> {
        let as_auth = match query.get("auth_variable_override") {
            None => None,
            Some(text) => {
                Some(serde_json::from_str::<Value>(text).map_err(|_| FbError::bad("auth_variable_override must be a JSON object or null"))?)
            }
        };
        Ok(Caller::Admin { as_auth })
    };
    match identity.allows(ns, TREE_PK, verb) {
        Ok(()) => as_admin(),
        Err(denied) => match identity.firebase_auth() {
            Some(auth) if verb != Verb::Admin => Ok(Caller::User { auth }),
            _ => {
                crate::metrics::AUTH_DENIED.inc();
                Err(FbError::new(StatusCode::FORBIDDEN, format!("permission_denied: {}", denied.message)))
            }
        },
    }
}

/// Who is asking without authentication: `Authorization: Bearer <token>` or `?auth=<token>`.
pub(super) fn legacy_caller(config: &FirebaseConfig, headers: &HeaderMap, query: &Query) -> Result<Caller, FbError> {
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ").map(str::trim));
    let Some(token) = bearer.or(query.get("auth")).or(query.get("access_token")) else {
        return Ok(Caller::User { auth: Value::Null });
    };
    if config.owner_token.as_deref() == Some(token) {
        let as_auth = match query.get("auth_variable_override") {
            None => None,
            Some(text) => {
                Some(serde_json::from_str::<Value>(text).map_err(|_| FbError::bad("auth_variable_override must be a JSON object or null"))?)
            }
        };
        return Ok(Caller::Admin { as_auth });
    }
    if config.emulator {
        if let Some(auth) = unsigned_id_token_auth(token) {
            let caller = Caller::User { auth };
            if caller.expired(now_ms()) {
                return Err(FbError::new(StatusCode::UNAUTHORIZED, "Auth token is expired"));
            }
            return Ok(caller);
        }
    }
    Err(FbError::new(StatusCode::UNAUTHORIZED, "Could not parse auth token."))
}

/// The emulator's convention: an ID token's claims are taken as they are,
/// signature unchecked (emulator mode only: anyone can mint one).
fn unsigned_id_token_auth(token: &str) -> Option<Value> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    let uid = claims.get("user_id").or(claims.get("sub")).or(claims.get("uid"))?.as_str()?.to_string();
    let provider = claims.pointer("/firebase/sign_in_provider").and_then(Value::as_str).unwrap_or("custom").to_string();
    Some(serde_json::json!({ "uid": uid, "provider": provider, "token": claims }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_id_tokens_carry_their_claims_in_emulator_mode() {
        use base64::Engine;
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"alice","email":"a@x"}"#);
        let auth = unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{claims}.")).unwrap();
        assert_eq!(auth["uid"], "alice");
        // The SDKs' mockUserToken: issued at the epoch, "expired" in 1970, taken as valid.
        let mock = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"bob","iat":0,"exp":3600}"#);
        let caller = Caller::User { auth: unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{mock}.")).unwrap() };
        assert!(!caller.expired(now_ms()));
        let old = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"bob","iat":1,"exp":3600}"#);
        assert!(Caller::User { auth: unsigned_id_token_auth(&format!("eyJhbGciOiJub25lIn0.{old}.")).unwrap() }.expired(now_ms()));
        assert_eq!(auth["token"]["email"], "a@x");
        assert!(unsigned_id_token_auth("owner").is_none());
    }
}
