//! `Firebase`: what Firebase's handlers are given — the edge's `AppState`,
//! how this node speaks Firebase (`FirebaseConfig`), the databases' state
//! (`db::Databases`) and the realtime connections' closing signal.

use std::sync::Arc;

use super::db::Databases;
use super::realtime::Closing;
use crate::edge::AppState;

/// How this node speaks Firebase.
#[derive(Debug, Clone, Default)]
pub struct FirebaseConfig {
    /// The bearer token that is the admin (`owner` in `tern dev`, the emulator's).
    pub owner_token: Option<String>,
    /// Emulator conventions: databases created on first use, open rules
    /// until some are set (never with authentication on), unsigned ID
    /// tokens' claims taken as `auth`.
    pub emulator: bool,
}

impl FirebaseConfig {
    pub fn new(owner_token: Option<String>, emulator: bool) -> FirebaseConfig {
        FirebaseConfig { owner_token, emulator }
    }
}

/// Cloned per request: reference counts only.
#[derive(Clone)]
pub struct Firebase {
    pub app: AppState,
    pub config: Arc<FirebaseConfig>,
    pub db: Arc<Databases>,
    /// Closes the realtime connections when the node stops.
    pub closing: Arc<Closing>,
}

impl Firebase {
    /// Firebase on `app` as `config` says (`app.access` decides whether a
    /// database without rules is open: never with authentication on).
    pub fn new(app: AppState, config: FirebaseConfig) -> Firebase {
        let open_without_rules = config.emulator && !app.access.enabled();
        Firebase { app, config: Arc::new(config), db: Arc::new(Databases::new(open_without_rules)), closing: Arc::default() }
    }

    /// Closes every realtime connection (the node stops); each makes its
    /// onDisconnect writes as it goes.
    pub fn close_connections(&self) {
        self.closing.close_all();
    }

    /// Fires the onDisconnect writes of connections that went away without
    /// making them (their node restarted or died), until the task is stopped.
    pub async fn sweep_forever(self) {
        super::db::ondisconnect::sweep_forever(self.app.node.clone(), self.app.cluster.clone(), self.db.clone()).await
    }
}
