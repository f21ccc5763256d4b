//! `GET /.ws`: the upgrade to a realtime connection — its version, its
//! database, its first credential — or a redirect to a node that holds the
//! database's tree; and `Closing`, which ends every connection when the
//! node stops.

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;

use super::requests::{Credential, Requests};
use super::{connection, wire};
use crate::edge::{connection_of, peer_of, Transport};
use crate::firebase::dispatch::database;
use crate::firebase::error::FbError;
use crate::firebase::query::Query;
use crate::firebase::state::Firebase;
use crate::tree::TREE_PK;

/// Where the realtime protocol is served.
pub const PATH: &str = "/.ws";
/// Largest WebSocket message from a client: the SDK's frames are at most
/// 16,384 UTF-16 units (up to 3 bytes each), a long message comes in several.
const CLIENT_FRAME_BYTES_MAX: usize = 64 * 1024;
/// Socket buffers per connection: messages are small and batched (as `/v1/ws`).
const READ_BUFFER_BYTES: usize = 4 * 1024;
/// The write side's: the connection batches what is queued into one flush.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

/// Tells open realtime connections to close (the node stops): each then
/// makes its onDisconnect writes.
pub struct Closing(tokio::sync::watch::Sender<bool>);

impl Default for Closing {
    fn default() -> Closing {
        Closing(tokio::sync::watch::channel(false).0)
    }
}

impl Closing {
    pub fn close_all(&self) {
        self.0.send_replace(true);
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// `GET /.ws`: checks the request, then upgrades it to a realtime connection.
pub async fn upgrade(state: Firebase, request: Request) -> Response {
    let (mut parts, _body) = request.into_parts();
    let query = Query::parse(parts.uri.query());
    if let Some(version) = query.get("v").filter(|v| *v != wire::PROTOCOL_VERSION) {
        return FbError::bad(format!(
            "this server speaks version {} of the realtime protocol (v={}), not v={version}",
            wire::PROTOCOL_VERSION,
            wire::PROTOCOL_VERSION
        ))
        .into_response();
    }
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &state).await {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    let peer = peer_of(&parts.extensions);
    let credential = match initial_credential(&state, &parts.headers, peer) {
        Ok(credential) => credential,
        Err(e) => return e.into_response(),
    };
    // Authenticated before anything is created: an anonymous upgrade
    // (browsers send their token later, in an `auth` message) never creates a database.
    let asker = match &credential {
        Credential::Identity { identity, .. } => Some(identity.as_ref()),
        Credential::Anonymous | Credential::Legacy(_) => None,
    };
    let namespace = match database(&state, &query, asker).await {
        Ok(namespace) => namespace,
        Err(e) => return e.into_response(),
    };
    let connection = connection_of(&parts.extensions);
    // The socket counts among the node's connections while it is served.
    let slot = Transport::of(&parts.extensions).and_then(|t| t.slot.clone());
    let host = parts.headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("127.0.0.1").to_string();
    let partition = namespace.partition_of(TREE_PK);
    let elsewhere =
        (!namespace.handle(partition).is_held()).then(|| state.app.cluster.holders(&namespace.name, partition).first().map(|m| m.api.clone()));
    let closing = state.closing.subscribe();
    let session = format!("{:032x}", rand::random::<u128>());
    let requests = Requests {
        state,
        namespace: namespace.clone(),
        session,
        connection,
        peer,
        credential,
        registrations: Default::default(),
        registrants: Vec::new(),
    };
    ws.max_message_size(CLIENT_FRAME_BYTES_MAX).read_buffer_size(READ_BUFFER_BYTES).write_buffer_size(WRITE_BUFFER_BYTES).on_upgrade(
        move |socket| async move {
            let _slot = slot;
            match elsewhere {
                None => connection::serve(requests, socket, host, closing).await,
                Some(holder) => redirect(socket, &namespace.name, holder).await,
            }
        },
    )
}

/// The connection's credential from the upgrade's `Authorization` (the
/// Node SDKs send it; browsers cannot, and send an `auth` message).
fn initial_credential(state: &Firebase, headers: &HeaderMap, peer: Option<std::net::IpAddr>) -> Result<Credential, FbError> {
    if !headers.contains_key(header::AUTHORIZATION) {
        return Ok(Credential::Anonymous);
    }
    match Credential::of(state, headers, peer, None) {
        Ok(credential) => Ok(credential),
        Err(refused) if state.app.access.enabled() => Err(refused),
        // A token the legacy rules do not know is left to the `auth` message.
        Err(_) => Ok(Credential::Anonymous),
    }
}

/// This node does not hold the database's tree: a reset sends the SDK to
/// a node that does (`holder`), or an error says none is known (the SDK
/// retries with its backoff).
async fn redirect(mut socket: WebSocket, database: &str, holder: Option<String>) {
    let message = match holder {
        Some(host) => wire::reset(&host),
        None => wire::error(&format!("no node is known to serve database {database:?}; retrying later may find one")),
    };
    let _ = socket.send(WsMessage::Text(message.into())).await;
    let _ = socket.close().await;
}
