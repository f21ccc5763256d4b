//! `GET|PUT /.settings/rules.json`: a database's rules, admin only.
//!
//! PUT parses the rules (a real parser: `crate::rules`) and refuses bad ones
//! with where and why (400), then writes them as one record through the
//! log, so every replica enforces the same rules. GET answers them as saved
//! (comments kept), or strict JSON with `?format=strict`. A node that does
//! not hold the rules' partition forwards both to a holder (its store is
//! not the rules every replica enforces).

use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::caller::Caller;
use super::db::{RULES_PK, RULES_SK};
use super::error::FbError;
use super::query::Query;
use super::state::Firebase;
use crate::codec::{Mutation, Op, OpKind};
use crate::edge::{to_holder, Incoming};
use crate::firebase::rules::Rules;
use crate::node::reserved::Writer;
use crate::node::write::{Entry, WriteError, WriteRequest};
use crate::partition::Namespace;

#[allow(clippy::too_many_arguments)]
pub(super) async fn handle(
    state: &Firebase,
    namespace: &Namespace,
    caller: &Caller,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    uri: &Uri,
    body: Bytes,
) -> Result<Response, FbError> {
    if !matches!(caller, Caller::Admin { .. }) {
        return Err(FbError::new(StatusCode::UNAUTHORIZED, "Unauthorized request: only the owner reads or writes rules"));
    }
    if !matches!(*method, Method::GET | Method::PUT) {
        // Refused here, never forwarded: a holder would refuse it too.
        return Err(FbError::method_not_allowed(method, "GET, PUT", " on rules"));
    }
    let partition = namespace.partition_of(RULES_PK);
    if !namespace.handle(partition).is_held() {
        let incoming = Incoming::new(method.clone(), uri, headers);
        return to_holder(&state.app, &incoming, &namespace.name, partition, body).await.map_err(FbError::from);
    }
    match *method {
        Method::GET => {
            let record = namespace.handle(partition).read_store()?.get(RULES_PK, RULES_SK)?;
            let text = state.db.rules_text(record.as_ref().map(|r| &r.value[..]));
            let text = if query.get("format") == Some("strict") { Rules::strict_text(&text) } else { text };
            Ok(([(header::CONTENT_TYPE, "application/json; charset=utf-8")], text).into_response())
        }
        Method::PUT => {
            let text = std::str::from_utf8(&body).map_err(|_| FbError::bad("rules must be UTF-8 text"))?;
            Rules::parse(text).map_err(FbError::bad)?;
            let value = serde_json::to_vec(text).expect("a string serializes");
            let mutation = Mutation {
                ops: vec![Op { pk: RULES_PK.into(), sk: RULES_SK.into(), kind: OpKind::Put(Bytes::from(value)), condition: None }],
                ..Default::default()
            };
            let timeout = std::time::Duration::from_millis(crate::limits::WAIT_MS_DEFAULT);
            let request = WriteRequest::new(Writer::FirebaseRules, partition, Entry::Mutation(mutation)).applied_within(timeout);
            match state.app.node.write_sequenced(namespace, request).await {
                Ok(_) => {}
                // Let go since the check above: nothing was written; a holder takes it.
                Err(WriteError::NotHeld { .. }) => {
                    let incoming = Incoming::new(method.clone(), uri, headers);
                    return to_holder(&state.app, &incoming, &namespace.name, partition, body).await.map_err(FbError::from);
                }
                Err(e) => return Err(FbError::from(e)),
            }
            Ok(([(header::CONTENT_TYPE, "application/json; charset=utf-8")], r#"{"status":"ok"}"#).into_response())
        }
        _ => unreachable!("other methods are refused above"),
    }
}
