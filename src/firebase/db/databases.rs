//! `Databases`: what this node keeps for the Firebase databases it serves —
//! their parsed rules, query indexes, the last push id, and its realtime
//! connections' sessions (for the onDisconnect sweeper). Each is bounded by
//! what it caches for (the namespaces, the indexes' entry bound, the open
//! connections).

use parking_lot::Mutex;

use super::indexes::Indexes;
use super::ondisconnect::Registry;
use super::push_id::PushIds;
use super::rules_cache::RulesCache;

pub struct Databases {
    /// A database without saved rules is open (the emulator's convention,
    /// never with authentication on), else locked.
    pub(super) open_without_rules: bool,
    pub(super) rules: RulesCache,
    /// Query indexes (`indexes.rs`).
    pub indexes: Indexes,
    pub(super) push: Mutex<PushIds>,
    /// This node's realtime connections, for the onDisconnect sweeper.
    pub registry: Registry,
    /// Turns for writes retried because what their rules read changed
    /// (`firebase::commit`): one lock per stripe of database names.
    retry_turns: Box<[tokio::sync::Mutex<()>]>,
}

/// Stripes of `retry_turns`: databases whose names share a stripe share turns.
const RETRY_TURN_STRIPES: usize = 64;

impl Databases {
    /// `open_without_rules`: see the field.
    pub fn new(open_without_rules: bool) -> Databases {
        Databases {
            open_without_rules,
            rules: RulesCache::default(),
            indexes: Indexes::default(),
            push: Mutex::new(PushIds::default()),
            registry: Registry::default(),
            retry_turns: (0..RETRY_TURN_STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }

    /// Waits for database `name`'s turn to retry a write (fair: first come,
    /// first served); the turn lasts while the guard lives.
    pub async fn retry_turn(&self, name: &str) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut hasher);
        self.retry_turns[hasher.finish() as usize % RETRY_TURN_STRIPES].lock().await
    }

    /// Whether a database without saved rules is open.
    pub fn open_without_rules(&self) -> bool {
        self.open_without_rules
    }
}
