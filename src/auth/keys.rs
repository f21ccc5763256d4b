//! API keys: `tern_<id>_<secret>`, where `id` is 16 hex digits (8 random
//! bytes, the key's name in lists and revocation) and `secret` 43 base64url
//! characters (32 random bytes). Only the secret's BLAKE3 hash is stored
//! (a 256-bit random secret needs no slow hash: there is nothing to guess),
//! in a record replicated through the log (`api/tokens.rs`); every node
//! keeps the records in a `KeyRing` it refreshes, so a revocation reaches
//! each node within a refresh.
//!
//! A presented secret is compared with the stored hash by
//! `blake3::Hash`'s equality, which is constant-time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use base64::Engine;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use super::grant::{Grant, GRANTS_PER_TOKEN_MAX};

/// Every API key starts so (and nothing else does: a JWT starts `eyJ`).
pub const KEY_PREFIX: &str = "tern_";
/// Random bytes of a key's id (16 hex digits: unique among `KEYS_MAX` keys).
const ID_BYTES: usize = 8;
/// Random bytes of a key's secret (256 bits: nothing to guess).
const SECRET_BYTES: usize = 32;
/// Most API keys a cluster holds: each node keeps them all in memory.
pub const KEYS_MAX: usize = 100_000;
/// Longest description kept with a key.
pub const DESCRIPTION_BYTES_MAX: usize = 256;

/// A new key: the token to hand out once, and the record to store.
pub struct NewKey {
    pub token: String,
    pub record: KeyRecord,
}

/// What is stored of a key (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: String,
    /// BLAKE3 of the secret, hex.
    pub hash: String,
    pub grants: Vec<Grant>,
    pub created_ms: u64,
    /// Who created it: `root`, `key:<id>` or `jwt:<sub>`.
    pub created_by: String,
    #[serde(default)]
    pub description: String,
}

impl KeyRecord {
    /// Checks a record before it is written and after it is read (pair assertion).
    pub fn check(&self) -> Result<(), String> {
        if !is_id(&self.id) {
            return Err(format!("key id {:?} is not {} hex digits", self.id, ID_BYTES * 2));
        }
        if blake3::Hash::from_hex(&self.hash).is_err() {
            return Err(format!("key {}: the stored hash is not a BLAKE3 hash", self.id));
        }
        if self.grants.is_empty() || self.grants.len() > GRANTS_PER_TOKEN_MAX {
            return Err(format!("a token carries 1 to {GRANTS_PER_TOKEN_MAX} grants; got {}", self.grants.len()));
        }
        if self.description.len() > DESCRIPTION_BYTES_MAX {
            return Err(format!("a token's description is at most {DESCRIPTION_BYTES_MAX} bytes"));
        }
        self.grants.iter().try_for_each(Grant::check)
    }
}

/// Makes a new key with `grants`.
pub fn generate(grants: Vec<Grant>, created_by: String, description: String, now_ms: u64) -> NewKey {
    let id_bytes: [u8; ID_BYTES] = rand::random();
    let secret_bytes: [u8; SECRET_BYTES] = rand::random();
    let id: String = id_bytes.iter().map(|b| format!("{b:02x}")).collect();
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret_bytes);
    let hash = blake3::hash(secret.as_bytes()).to_hex().to_string();
    NewKey { token: format!("{KEY_PREFIX}{id}_{secret}"), record: KeyRecord { id, hash, grants, created_ms: now_ms, created_by, description } }
}

fn is_id(id: &str) -> bool {
    id.len() == ID_BYTES * 2 && id.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// `(id, secret)` of a well-formed API key.
pub fn split(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (is_id(id) && !secret.is_empty() && secret.len() <= 128).then_some((id, secret))
}

/// A stored key as requests see it: the hash parsed once.
#[derive(Debug)]
pub struct Key {
    pub record: KeyRecord,
    hash: blake3::Hash,
}

/// Every key this node knows, by id. Replaced whole by each refresh.
pub struct KeyRing {
    keys: RwLock<HashMap<String, Arc<Key>>>,
    /// Changes with every change of `keys` (unique across rings: from
    /// `GENERATIONS`), so a thread's cached verification (`LAST_VERIFIED`)
    /// is used only while nothing changed.
    generation: AtomicU64,
    /// Counts revocations (a key that was here and is gone): what open
    /// connections of a key wait on (`Authenticator::lapsed`), so they wake
    /// only when some key went away, not at every refresh.
    revocations: tokio::sync::watch::Sender<u64>,
    /// Keys created (`Some`) or revoked (`None`) here, each kept over the
    /// refreshes until one loads it the same way, for at most
    /// `LOCAL_CHANGE_PIN_MAX`: a refresh whose read began before the change
    /// was applied would otherwise undo it — drop a key just made, killing
    /// its first connections as if revoked, or bring back a key just
    /// revoked — until the next refresh. At most `LOCAL_CHANGES_MAX`.
    local: parking_lot::Mutex<HashMap<String, LocalChange>>,
}

/// A key made (`Some`) or revoked (`None`) here, and when.
type LocalChange = (Option<Arc<Key>>, std::time::Instant);

/// How long a key made or revoked here outlasts refreshes that do not
/// show it yet (a refresh reads the store, or a holder, every second).
const LOCAL_CHANGE_PIN_MAX: std::time::Duration = std::time::Duration::from_secs(10);
/// Local changes kept at once (the oldest goes first).
const LOCAL_CHANGES_MAX: usize = 10_000;

impl Default for KeyRing {
    fn default() -> KeyRing {
        KeyRing {
            keys: RwLock::default(),
            generation: AtomicU64::new(0),
            revocations: tokio::sync::watch::Sender::new(0),
            local: parking_lot::Mutex::default(),
        }
    }
}

/// Where generations come from (never 0: 0 is "no generation yet").
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// The last key a thread verified: the ring's generation, the token, the key.
type LastVerified = (u64, Box<str>, Arc<Key>);

thread_local! {
    /// This thread's last verified token: (ring generation, token, key).
    /// A connection sends the same token with every request, and a thread
    /// serves the same connections: comparing the token in constant time
    /// is cheaper than hashing its secret again.
    static LAST_VERIFIED: std::cell::RefCell<Option<LastVerified>> = const { std::cell::RefCell::new(None) };
}

impl KeyRing {
    /// Replaces the keys with `records` (those that do not check are
    /// skipped, said once per refresh).
    pub fn replace(&self, records: Vec<KeyRecord>) {
        let mut keys = HashMap::with_capacity(records.len());
        for record in records.into_iter().take(KEYS_MAX) {
            if let Err(e) = record.check() {
                tracing::warn!(error = %e, "skipping a stored API key that does not check");
                continue;
            }
            let hash = blake3::Hash::from_hex(&record.hash).expect("checked");
            keys.insert(record.id.clone(), Arc::new(Key { record, hash }));
        }
        self.keep_local_changes(&mut keys);
        let revoked = {
            let mut current = self.keys.write();
            let revoked = current.iter().any(|(id, key)| keys.get(id).is_none_or(|new| new.hash != key.hash));
            *current = keys;
            revoked
        };
        self.changed();
        if revoked {
            self.revocations.send_modify(|count| *count += 1);
        }
    }

    /// Applies the changes made here that `loaded` does not show yet, and
    /// forgets those it shows (or that are too old).
    fn keep_local_changes(&self, loaded: &mut HashMap<String, Arc<Key>>) {
        let mut local = self.local.lock();
        local.retain(|id, (change, at)| {
            let shown = match change {
                Some(key) => loaded.get(id).is_some_and(|k| k.hash == key.hash),
                None => !loaded.contains_key(id),
            };
            let keep = !shown && at.elapsed() < LOCAL_CHANGE_PIN_MAX;
            if keep {
                match change {
                    Some(key) => loaded.insert(id.clone(), key.clone()),
                    None => loaded.remove(id),
                };
            }
            keep
        });
    }

    /// Remembers a change made here (see `local`).
    fn note_local(&self, id: &str, change: Option<Arc<Key>>) {
        let mut local = self.local.lock();
        if local.len() >= LOCAL_CHANGES_MAX && !local.contains_key(id) {
            if let Some(oldest) = local.iter().min_by_key(|(_, (_, at))| *at).map(|(id, _)| id.clone()) {
                local.remove(&oldest);
            }
        }
        local.insert(id.to_string(), (change, std::time::Instant::now()));
    }

    fn changed(&self) {
        self.generation.store(GENERATIONS.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// Adds or replaces one key (one just created here, before the next refresh).
    pub fn insert(&self, record: KeyRecord) {
        if let Ok(hash) = blake3::Hash::from_hex(&record.hash) {
            let key = Arc::new(Key { record, hash });
            self.note_local(&key.record.id, Some(key.clone()));
            self.keys.write().insert(key.record.id.clone(), key);
            self.changed();
        }
    }

    /// Forgets one key (revoked here, before the next refresh).
    pub fn remove(&self, id: &str) {
        self.note_local(id, None);
        self.keys.write().remove(id);
        self.changed();
        self.revocations.send_modify(|count| *count += 1);
    }

    /// Whether `key` is still one of this ring's (not revoked, not replaced).
    pub fn holds(&self, key: &Key) -> bool {
        self.keys.read().get(&key.record.id).is_some_and(|current| current.hash == key.hash)
    }

    /// Changes whenever a key is revoked (`Authenticator::lapsed`).
    pub fn revocations(&self) -> tokio::sync::watch::Receiver<u64> {
        self.revocations.subscribe()
    }

    /// The key `token` names, if its secret matches (constant-time).
    pub fn verify(&self, token: &str) -> Option<Arc<Key>> {
        // Read before the keys: a change after this makes the cached entry stale, never wrong.
        let generation = self.generation.load(Ordering::Acquire);
        let cached = LAST_VERIFIED.with(|last| match &*last.borrow() {
            Some((g, t, key)) if *g == generation && generation != 0 && constant_time_eq::constant_time_eq(t.as_bytes(), token.as_bytes()) => {
                Some(key.clone())
            }
            _ => None,
        });
        if cached.is_some() {
            return cached;
        }
        let (id, secret) = split(token)?;
        let key = self.keys.read().get(id).cloned()?;
        if blake3::hash(secret.as_bytes()) != key.hash {
            return None;
        }
        LAST_VERIFIED.with(|last| *last.borrow_mut() = Some((generation, token.into(), key.clone())));
        Some(key)
    }

    /// The record of key `id`.
    pub fn get(&self, id: &str) -> Option<KeyRecord> {
        self.keys.read().get(id).map(|k| k.record.clone())
    }

    pub fn records(&self) -> Vec<KeyRecord> {
        let mut records: Vec<KeyRecord> = self.keys.read().values().map(|k| k.record.clone()).collect();
        records.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then_with(|| a.id.cmp(&b.id)));
        records
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        self.keys.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::grant::{Verb, Verbs};

    fn grants() -> Vec<Grant> {
        vec![Grant { ns: "app".into(), prefix: String::new(), verbs: Verbs::of(&[Verb::Read]) }]
    }

    /// A refresh that read the keys before a key was made (or revoked) here
    /// does not undo it: before, the new key vanished until the next
    /// refresh (its connections woken as revoked), and a key just revoked
    /// came back for a second.
    #[test]
    fn a_refresh_older_than_a_local_change_does_not_undo_it() {
        let ring = KeyRing::default();
        let old = generate(grants(), "root".into(), String::new(), 1);
        ring.replace(vec![old.record.clone()]);
        let stale = vec![old.record.clone()];
        let revocations = ring.revocations();
        let new = generate(grants(), "root".into(), String::new(), 2);
        ring.insert(new.record.clone());
        ring.replace(stale.clone());
        assert!(ring.verify(&new.token).is_some(), "a key made here outlasts a refresh that does not show it yet");
        assert_eq!(*revocations.borrow(), 0, "and nothing was revoked");
        ring.remove(&old.record.id);
        ring.replace(stale);
        assert!(ring.verify(&old.token).is_none(), "a key revoked here stays revoked");
        // A refresh that shows both changes ends the pins: the loaded state decides again.
        ring.replace(vec![new.record.clone()]);
        assert!(ring.local.lock().is_empty(), "{:?}", ring.local.lock().keys().collect::<Vec<_>>());
        ring.replace(vec![]);
        assert!(ring.verify(&new.token).is_none(), "revoked elsewhere: gone at the next refresh");
    }

    #[test]
    fn a_generated_key_verifies_and_nothing_else_does() {
        let ring = KeyRing::default();
        let new = generate(grants(), "root".into(), String::new(), 1);
        new.record.check().unwrap();
        // The whole secret (URL-safe base64 has '_' too: a piece of it, a
        // few hex-like characters, was found in the hex hash now and then).
        assert!(!new.record.hash.contains(new.token.splitn(3, '_').nth(2).unwrap()), "the secret is never stored");
        ring.insert(new.record.clone());
        assert_eq!(ring.verify(&new.token).unwrap().record.id, new.record.id);
        let mut wrong = new.token.clone();
        wrong.pop();
        wrong.push(if new.token.ends_with('A') { 'B' } else { 'A' });
        assert!(ring.verify(&wrong).is_none());
        assert!(ring.verify("tern_").is_none());
        assert!(ring.verify("tern_0123456789abcdef_").is_none());
        assert!(ring.verify(&format!("tern_{}_x", "é".repeat(8))).is_none());
        assert!(ring.verify(&new.token).is_some(), "again, from this thread's cache");
        ring.remove(&new.record.id);
        assert!(ring.verify(&new.token).is_none(), "a revoked key is refused at once, cached or not");
        // Another ring (another node in a test) never answers from this ring's cache.
        let other = KeyRing::default();
        assert!(other.verify(&new.token).is_none());
        other.insert(new.record.clone());
        assert!(other.verify(&new.token).is_some());
        assert!(ring.verify(&new.token).is_none());
    }

    #[test]
    fn records_that_do_not_check_are_skipped() {
        let ring = KeyRing::default();
        let good = generate(grants(), "root".into(), String::new(), 1).record;
        let mut no_grants = generate(grants(), "root".into(), String::new(), 2).record;
        no_grants.grants.clear();
        let mut bad_hash = generate(grants(), "root".into(), String::new(), 3).record;
        bad_hash.hash = "zz".into();
        ring.replace(vec![good.clone(), no_grants, bad_hash]);
        assert_eq!(ring.records(), vec![good]);
    }
}
