//! `Authenticator`: verifies a request's token (the root token, an API key
//! from the key ring, a JWT) into an `Identity`, with the failed-
//! authentication limiter beside it.

use super::identity::{AuthError, Identity};
use super::jwt::{JwtConfig, JwtVerifier};
use super::keys;
use super::keys::KeyRing;
use super::limiter::FailureLimiter;
use std::sync::Arc;

/// How a node authenticates (built from the settings).
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// The root token (the admin token file's contents).
    pub root_token: Option<String>,
    pub jwt: JwtConfig,
    /// Failed authentications per minute per source address (0: unlimited).
    pub failures_per_minute: u32,
}

/// When a verified JWT stops being valid, in ms since the epoch: its `exp`
/// (required at verification) plus the skew verification tolerates.
fn jwt_expires_ms(jwt: &super::jwt::Verified) -> Option<u64> {
    let exp_s = jwt.claims.get("exp")?.as_f64()?;
    Some((exp_s.max(0.0) as u64).saturating_add(super::jwt::LEEWAY_S).saturating_mul(1000))
}

/// Verifies tokens. One per node, shared by every request.
pub struct Authenticator {
    pub(super) root: Option<blake3::Hash>,
    pub keys: KeyRing,
    pub(super) jwt: Option<JwtVerifier>,
    pub limiter: FailureLimiter,
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

    /// Why `identity`, authenticated earlier, is no longer valid now (its
    /// API key was revoked, its JWT expired), if it is not. Open
    /// connections ask before each request they decide (`lapsed` ends them).
    pub fn still_valid(&self, identity: &Identity, now_ms: u64) -> Result<(), AuthError> {
        match identity {
            Identity::Open | Identity::Root => Ok(()),
            Identity::Key(key) if self.keys.holds(key) => Ok(()),
            Identity::Key(_) => Err(AuthError::Invalid("the API key was revoked".into())),
            Identity::Jwt(jwt) => match jwt_expires_ms(jwt) {
                Some(expires_ms) if expires_ms <= now_ms => Err(AuthError::Invalid("the JWT has expired (exp)".into())),
                _ => Ok(()),
            },
        }
    }

    /// Resolves once `identity` is no longer valid (`still_valid`): at once
    /// when a revocation removes its key (woken by revocations only, not by
    /// every refresh), at its JWT's `exp` (with the skew tolerated at
    /// verification). Never, for the root token or authentication off. Each
    /// long-lived connection and watch runs until this resolves, so a
    /// revoked or expired credential stops reading and writing within the
    /// key refresh (about a second) everywhere.
    pub async fn lapsed(&self, identity: &Identity) {
        match identity {
            Identity::Open | Identity::Root => std::future::pending().await,
            Identity::Key(key) => {
                let mut revocations = self.keys.revocations();
                while self.keys.holds(key) {
                    if revocations.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
            Identity::Jwt(jwt) => match jwt_expires_ms(jwt) {
                Some(expires_ms) => {
                    let wait_ms = expires_ms.saturating_sub(crate::codec::now_ms());
                    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await
                }
                None => std::future::pending().await,
            },
        }
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
