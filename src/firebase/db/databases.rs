//! `Databases`: what this node keeps for the Firebase databases it serves —
//! their parsed rules, query indexes, the last push id, and its realtime
//! connections' sessions (for the onDisconnect sweeper). Each is bounded by
//! what it caches for (the namespaces, the indexes' entry bound, the open
//! connections).

use std::collections::HashMap;
use std::sync::Arc;

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
    /// (`firebase::commit`): one lock per database, bounded by the
    /// namespaces this node knows.
    retry_turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Databases {
    /// `open_without_rules`: see the field.
    pub fn new(open_without_rules: bool) -> Databases {
        Databases {
            open_without_rules,
            rules: RulesCache::default(),
            indexes: Indexes::default(),
            push: Mutex::new(PushIds::default()),
            registry: Registry::default(),
            retry_turns: Mutex::default(),
        }
    }

    /// Waits for database `name`'s turn to retry a write (fair: first come,
    /// first served); the turn lasts while the guard lives.
    pub async fn retry_turn(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self.retry_turns.lock().entry(name.to_string()).or_default().clone();
        turn.lock_owned().await
    }

    /// Whether a database without saved rules is open.
    pub fn open_without_rules(&self) -> bool {
        self.open_without_rules
    }
}
