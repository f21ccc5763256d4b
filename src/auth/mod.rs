//! Who is asking, and what they may do (issue 20).
//!
//! A request carries `Authorization: Bearer TOKEN`. A token is one of:
//! - the **root token**, read from the admin token file (`tern dev --auth`:
//!   `<data-dir>/admin.token`, made at first start with mode 0600): every
//!   verb everywhere, system namespaces included; the nodes of a cluster
//!   share it (they also use it to read the API keys from each other);
//! - an **API key** (`keys.rs`): `tern_<id>_<secret>`, stored hashed in the
//!   system namespace through the log, made and revoked with
//!   `tern token create|ls|revoke`; its grants are stored with it;
//! - a **JWT** (`jwt.rs`) verified against configured keys; its grants are
//!   a claim, and its claims are Firebase rules' `auth`.
//!
//! What an identity may do is decided by its grants (`grant.rs`: deny by
//! default, the most specific grant wins). Failed authentications are
//! rate-limited per source address (`limiter.rs`).
//!
//! Owns: token formats, verification, grants and the decision, and keeping
//! each node's key ring current (`key_refresh.rs`). Never: answering HTTP
//! (`edge/access.rs` turns this into 401 and 403), writing keys (the API
//! writes their records through the log).

pub mod grant;
pub mod jwt;
pub mod key_refresh;
pub mod keys;
pub mod limiter;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

pub use self::grant::{Denied, Grant, Verb, Verbs};
use self::jwt::{JwtConfig, JwtVerifier, Verified};
use self::keys::{Key, KeyRing};
use self::limiter::FailureLimiter;

/// The system namespace that holds the API keys (pk `KEYS_PK`, sk = key id).
/// Its name cannot be a user's (names start with a letter or digit), and
/// no grant's `*` covers it.
pub use crate::node::reserved::{KEYS_PK, SYSTEM_NAMESPACE};
/// Shortest root token accepted from a file someone wrote by hand.
const ROOT_TOKEN_CHARS_MIN: usize = 32;

/// How a node authenticates (built from the settings).
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// The root token (the admin token file's contents).
    pub root_token: Option<String>,
    pub jwt: JwtConfig,
    /// Failed authentications per minute per source address (0: unlimited).
    pub failures_per_minute: u32,
}

/// Verifies tokens. One per node, shared by every request.
pub struct Authenticator {
    root: Option<blake3::Hash>,
    pub keys: KeyRing,
    jwt: Option<JwtVerifier>,
    pub limiter: FailureLimiter,
}

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

impl Authenticator {
    pub fn new(config: &AuthConfig) -> anyhow::Result<Authenticator> {
        Ok(Authenticator {
            root: config.root_token.as_deref().map(|t| blake3::hash(t.as_bytes())),
            keys: KeyRing::default(),
            jwt: JwtVerifier::load(&config.jwt)?,
            limiter: FailureLimiter::new(config.failures_per_minute),
        })
    }

    /// Who `token` is.
    pub fn authenticate(&self, token: &str) -> Result<Identity, AuthError> {
        let token = token.trim();
        if token.is_empty() {
            return Err(AuthError::Missing);
        }
        // An API key first (the common case; a root token never has its shape).
        if keys::split(token).is_some() {
            return self.keys.verify(token).map(Identity::Key).ok_or_else(|| AuthError::Invalid("no such API key, or it was revoked".into()));
        }
        // Constant-time: blake3::Hash's equality.
        if self.root.is_some_and(|root| blake3::hash(token.as_bytes()) == root) {
            return Ok(Identity::Root);
        }
        if token.starts_with(keys::KEY_PREFIX) {
            return Err(AuthError::Invalid("it starts like an API key but is not one (tern_<16 hex>_<secret>)".into()));
        }
        if token.split('.').count() == 3 {
            let Some(jwt) = &self.jwt else {
                return Err(AuthError::Invalid("this node verifies no JWTs (no jwt_keys or jwt_jwks_file)".into()));
            };
            return jwt.verify(token).map(|v| Identity::Jwt(Arc::new(v))).map_err(AuthError::Invalid);
        }
        Err(AuthError::Invalid("it is neither an API key (tern_…) nor a JWT".into()))
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

/// The root token in `path`, made there (mode 0600) when the file does not
/// exist. The file may also be written by hand (at least 32 characters).
pub fn load_or_create_root_token(path: &Path) -> anyhow::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_string();
            anyhow::ensure!(
                token.chars().count() >= ROOT_TOKEN_CHARS_MIN,
                "the admin token file {} holds fewer than {ROOT_TOKEN_CHARS_MIN} characters; write a longer secret or delete it to have one made",
                path.display()
            );
            anyhow::ensure!(
                keys::split(&token).is_none(),
                "the admin token file {} holds a token shaped like an API key (tern_<id>_<secret>); use another secret",
                path.display()
            );
            warn_if_readable_by_others(path);
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = new_root_token();
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)
            }
            .map_err(|e| anyhow::anyhow!("cannot create the admin token file {}: {e}", path.display()))?;
            writeln!(file, "{token}")?;
            file.sync_all()?;
            Ok(token)
        }
        Err(e) => anyhow::bail!("cannot read the admin token file {}: {e}", path.display()),
    }
}

fn new_root_token() -> String {
    use base64::Engine;
    let secret: [u8; 32] = rand::random();
    format!("tern-root-{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret))
}

fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "the admin token file is readable by others than its owner; chmod 600 it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_token_file_is_made_once_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.token");
        let token = load_or_create_root_token(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create_root_token(&path).unwrap(), token, "read again, not made again");
        std::fs::write(&path, "short").unwrap();
        assert!(load_or_create_root_token(&path).is_err());
    }

    #[test]
    fn tokens_are_told_apart_and_errors_never_repeat_them() {
        let auth = Authenticator::new(&AuthConfig { root_token: Some("r".repeat(40)), ..Default::default() }).unwrap();
        assert!(matches!(auth.authenticate(&"r".repeat(40)), Ok(Identity::Root)));
        assert_eq!(auth.authenticate("  ").unwrap_err(), AuthError::Missing);
        for bad in ["tern_nothex_x", "tern_0123456789abcdef_secret", "a.b.c", "owner", &"r".repeat(39)] {
            let error = auth.authenticate(bad).unwrap_err();
            assert!(matches!(error, AuthError::Invalid(_)), "{bad}");
            assert!(!error.message().contains(bad), "{bad}: {}", error.message());
        }
        let new = keys::generate(
            vec![Grant { ns: "app".into(), prefix: String::new(), verbs: Verbs::of(&[Verb::Read]) }],
            "root".into(),
            String::new(),
            0,
        );
        auth.keys.insert(new.record.clone());
        let identity = auth.authenticate(&new.token).unwrap();
        assert_eq!(identity.name(), format!("key:{}", new.record.id));
        assert!(identity.allows("app", "x", Verb::Read).is_ok());
        assert!(identity.allows("app", "x", Verb::Write).is_err());
        assert!(identity.allows_everywhere(Verb::Admin).is_err());
    }
}
