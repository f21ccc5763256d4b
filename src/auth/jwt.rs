//! JWTs verified against configured keys (`jsonwebtoken`): HS256 (a shared
//! secret), RS256, ES256 and EdDSA (PEM public keys), and the keys of a JWKS
//! file (chosen by the token's `kid`). `exp` is required; `nbf`, `aud` (when
//! audiences are configured) and `iss` (when issuers are) are checked.
//!
//! A verified token's claims become Firebase rules' `auth` (`uid` = `sub`,
//! `token` = the claims), and its grants for Tern's own API are the claim
//! named by `jwt_grants_claim` (an array of grants; none: no grants).

use std::path::Path;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::grant::{Grant, GRANTS_PER_TOKEN_MAX};

/// Clock skew tolerated on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 30;
/// Longest JWT looked at (a header of 8 KiB is the usual server limit).
pub const TOKEN_BYTES_MAX: usize = 8 * 1024;

/// How JWTs are verified (built from the settings).
#[derive(Debug, Clone, Default)]
pub struct JwtConfig {
    /// `ALG:PATH`: `HS256:/secret`, `RS256:/pub.pem`, `ES256:/pub.pem`, `EdDSA:/pub.pem`.
    pub keys: Vec<String>,
    pub jwks_file: Option<std::path::PathBuf>,
    pub audiences: Vec<String>,
    pub issuers: Vec<String>,
    pub grants_claim: String,
}

struct VerifyingKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// The configured keys, loaded once at start.
pub struct JwtVerifier {
    keys: Vec<VerifyingKey>,
    audiences: Vec<String>,
    issuers: Vec<String>,
    grants_claim: String,
}

/// A verified JWT.
#[derive(Debug, Clone)]
pub struct Verified {
    pub subject: String,
    pub claims: Value,
    pub grants: Vec<Grant>,
}

impl JwtVerifier {
    /// Loads the keys; None when no key is configured.
    pub fn load(config: &JwtConfig) -> anyhow::Result<Option<JwtVerifier>> {
        let mut keys = Vec::new();
        for spec in &config.keys {
            keys.push(load_key(spec)?);
        }
        if let Some(path) = &config.jwks_file {
            keys.extend(load_jwks(path)?);
        }
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(Some(JwtVerifier {
            keys,
            audiences: config.audiences.clone(),
            issuers: config.issuers.clone(),
            grants_claim: config.grants_claim.clone(),
        }))
    }

    /// Verifies `token`; the error says why, never repeating the token.
    pub fn verify(&self, token: &str) -> Result<Verified, String> {
        if token.len() > TOKEN_BYTES_MAX {
            return Err(format!("the JWT is longer than {TOKEN_BYTES_MAX} bytes"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("not a JWT: {e}"))?;
        let mut last_error = format!("no configured key verifies {:?} tokens", header.alg);
        for key in self.keys.iter().filter(|k| k.algorithm == header.alg) {
            if let (Some(wanted), Some(kid)) = (&header.kid, &key.kid) {
                if wanted != kid {
                    continue;
                }
            }
            match jsonwebtoken::decode::<Value>(token, &key.key, &self.validation(key.algorithm)) {
                Ok(data) => return self.verified(data.claims),
                Err(e) => match e.kind() {
                    jsonwebtoken::errors::ErrorKind::InvalidSignature => last_error = "the signature does not verify".into(),
                    _ => return Err(describe(&e)),
                },
            }
        }
        Err(last_error)
    }

    fn validation(&self, algorithm: Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.validate_aud = !self.audiences.is_empty();
        if !self.audiences.is_empty() {
            validation.set_audience(&self.audiences);
        }
        if !self.issuers.is_empty() {
            validation.set_issuer(&self.issuers);
        }
        validation
    }

    fn verified(&self, claims: Value) -> Result<Verified, String> {
        let subject = claims.get("sub").and_then(Value::as_str).unwrap_or_default().to_string();
        let grants = match claims.get(&self.grants_claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(value) => {
                let grants: Vec<Grant> = serde_json::from_value(value.clone())
                    .map_err(|e| format!("the JWT's {:?} claim is not a list of grants: {e}", self.grants_claim))?;
                if grants.len() > GRANTS_PER_TOKEN_MAX {
                    return Err(format!("the JWT carries {} grants; at most {GRANTS_PER_TOKEN_MAX}", grants.len()));
                }
                grants.iter().try_for_each(Grant::check)?;
                grants
            }
        };
        Ok(Verified { subject, claims, grants })
    }
}

fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => "the JWT has expired (exp)".into(),
        ErrorKind::ImmatureSignature => "the JWT is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the JWT's audience (aud) is not one this node accepts".into(),
        ErrorKind::InvalidIssuer => "the JWT's issuer (iss) is not one this node accepts".into(),
        ErrorKind::MissingRequiredClaim(claim) => format!("the JWT lacks the {claim:?} claim"),
        other => format!("the JWT does not verify: {other:?}"),
    }
}

fn load_key(spec: &str) -> anyhow::Result<VerifyingKey> {
    let (alg, path) = spec.split_once(':').ok_or_else(|| anyhow::anyhow!("jwt_keys: each is ALG:PATH, got {spec:?}"))?;
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("jwt_keys: cannot read {path}: {e}"))?;
    let (algorithm, key) = match alg {
        "HS256" => {
            let secret = String::from_utf8_lossy(&bytes).trim().as_bytes().to_vec();
            anyhow::ensure!(secret.len() >= 32, "jwt_keys: the HS256 secret in {path} is shorter than 32 bytes");
            (Algorithm::HS256, DecodingKey::from_secret(&secret))
        }
        "RS256" => (Algorithm::RS256, DecodingKey::from_rsa_pem(&bytes).map_err(|e| anyhow::anyhow!("jwt_keys: {path}: {e}"))?),
        "ES256" => (Algorithm::ES256, DecodingKey::from_ec_pem(&bytes).map_err(|e| anyhow::anyhow!("jwt_keys: {path}: {e}"))?),
        "EdDSA" => (Algorithm::EdDSA, DecodingKey::from_ed_pem(&bytes).map_err(|e| anyhow::anyhow!("jwt_keys: {path}: {e}"))?),
        other => anyhow::bail!("jwt_keys: algorithm {other:?} is not supported: use HS256, RS256, ES256 or EdDSA"),
    };
    Ok(VerifyingKey { kid: None, algorithm, key })
}

fn load_jwks(path: &Path) -> anyhow::Result<Vec<VerifyingKey>> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("jwt_jwks_file: cannot read {}: {e}", path.display()))?;
    let set: JwkSet = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("jwt_jwks_file {}: {e}", path.display()))?;
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let key = DecodingKey::from_jwk(jwk).map_err(|e| anyhow::anyhow!("jwt_jwks_file {}: {e}", path.display()))?;
        let algorithm = match jwk.common.key_algorithm.and_then(|a| a.to_string().parse::<Algorithm>().ok()) {
            Some(algorithm) => algorithm,
            None => match &jwk.algorithm {
                jsonwebtoken::jwk::AlgorithmParameters::RSA(_) => Algorithm::RS256,
                jsonwebtoken::jwk::AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_) => Algorithm::HS256,
            },
        };
        keys.push(VerifyingKey { kid: jwk.common.key_id.clone(), algorithm, key });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn verifier(audiences: &[&str]) -> (JwtVerifier, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hs.key");
        std::fs::write(&path, SECRET).unwrap();
        let config = JwtConfig {
            keys: vec![format!("HS256:{}", path.display())],
            audiences: audiences.iter().map(|s| s.to_string()).collect(),
            issuers: vec!["https://issuer".into()],
            grants_claim: "tern_grants".into(),
            ..Default::default()
        };
        (JwtVerifier::load(&config).unwrap().unwrap(), dir)
    }

    fn token(claims: Value) -> String {
        encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET.as_bytes())).unwrap()
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    #[test]
    fn a_good_token_verifies_and_carries_its_grants() {
        let (verifier, _dir) = verifier(&["tern"]);
        let verified = verifier
            .verify(&token(json!({"sub": "alice", "aud": "tern", "iss": "https://issuer", "exp": now() + 600,
                "tern_grants": [{"ns": "app", "prefix": "u/", "verbs": ["read"]}]})))
            .unwrap();
        assert_eq!(verified.subject, "alice");
        assert_eq!(verified.grants.len(), 1);
    }

    #[test]
    fn expired_early_wrong_audience_wrong_issuer_and_forged_are_refused() {
        let (verifier, _dir) = verifier(&["tern"]);
        let base = json!({"sub": "a", "aud": "tern", "iss": "https://issuer", "exp": now() + 600});
        let with = |k: &str, v: Value| {
            let mut c = base.clone();
            c[k] = v;
            token(c)
        };
        assert!(verifier.verify(&with("exp", json!(now() - 3600))).unwrap_err().contains("expired"));
        assert!(verifier.verify(&with("nbf", json!(now() + 3600))).unwrap_err().contains("nbf"));
        assert!(verifier.verify(&with("aud", json!("other"))).unwrap_err().contains("aud"));
        assert!(verifier.verify(&with("iss", json!("https://evil"))).unwrap_err().contains("iss"));
        let forged = encode(&Header::new(Algorithm::HS256), &base, &EncodingKey::from_secret(b"another secret of 32 bytes......")).unwrap();
        assert!(verifier.verify(&forged).unwrap_err().contains("signature"));
        assert!(verifier.verify("not.a.jwt").is_err());
        assert!(verifier.verify(&format!("{}.{}.x", "a".repeat(TOKEN_BYTES_MAX), "b")).unwrap_err().contains("longer than"));
        let mut no_exp = base.clone();
        no_exp.as_object_mut().unwrap().remove("exp");
        assert!(verifier.verify(&token(no_exp)).unwrap_err().contains("exp"));
        let bad_grants = with("tern_grants", json!([{"ns": "app", "verbs": ["fly"]}]));
        assert!(verifier.verify(&bad_grants).unwrap_err().contains("grants"));
    }

    #[test]
    fn an_error_never_repeats_the_token() {
        let (verifier, _dir) = verifier(&["tern"]);
        let t = token(json!({"sub": "a", "aud": "x", "exp": now() + 600}));
        assert!(!verifier.verify(&t).unwrap_err().contains(&t));
    }
}
