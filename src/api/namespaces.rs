//! Namespace calls: create, list, describe (with per-partition state), delete.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body;
use super::keys::NsName;
use crate::auth::{Identity, Verb};
use crate::edge::{require_all_of, require_anywhere, ApiError, AppState, Caller};
use crate::limits::HISTORY_MAX_MAX;
use crate::node::namespace_options::WriteMode;
use crate::node::DeleteError;
use crate::partition::PartitionStatus;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// Required to create; may be left out to change an existing namespace's options.
    partitions: Option<u32>,
    write_mode: Option<WriteMode>,
    /// How many versions of each record to keep (`store::history`).
    history_max: Option<u32>,
    /// An existing Kafka topic to read as the namespace's log (its
    /// partitions are the namespace's): issue 23, docs/procedures.md.
    source_topic: Option<String>,
}

/// Most outbox messages counted per partition for `GET /v1/ns/{ns}` (the
/// count is a bounded scan; "100000" reads as "at least").
const OUTBOX_COUNTED_MAX: usize = 100_000;

/// Bodies of namespace calls are tiny.
const NAMESPACE_BODY_BYTES_MAX: usize = 4096;

/// `PUT /v1/ns/{ns}` `{"partitions": N, "write_mode": "sequenced" | "journaled", "history_max": H}`:
/// 201 created, 200 same again (or options changed), 409 different
/// partition count. `partitions` may be left out when the namespace exists
/// (to change its `write_mode` only).
///
/// `{"source_topic": "T"}` creates the namespace on the existing Kafka
/// topic T (its partitions; `partitions`, if given, must be T's count):
/// 400 no such topic or not a usable name, 409 the namespace exists
/// otherwise or T is another namespace's source.
pub(super) async fn create(State(state): State<AppState>, Caller(identity): Caller, NsName(ns): NsName, body: Body) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Admin)?;
    let bytes = body::read(body, NAMESPACE_BODY_BYTES_MAX, "body_too_large", "the namespace body").await?;
    let request: CreateBody = body::json(&bytes)?;
    if let Some(history_max) = request.history_max.filter(|n| *n > HISTORY_MAX_MAX) {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!("history_max is 0 to {HISTORY_MAX_MAX} versions per record, got {history_max}"),
        ));
    }
    let created = match (request.source_topic.as_deref(), request.partitions) {
        (Some(source), partitions) => state.node.create_sourced_namespace(&ns, source, partitions).await?,
        (None, Some(partitions)) => state.node.create_namespace(&ns, partitions).await?,
        (None, None) if state.node.namespace(&ns).is_some() => false,
        (None, None) => {
            return Err(ApiError::bad_request("invalid_request", format!("namespace {ns:?} does not exist: creating it needs \"partitions\"")))
        }
    };
    let namespace = state.node.namespace(&ns).ok_or_else(|| ApiError::unknown_namespace(&ns))?;
    let (known, sure) = state.node.namespace_options_known(&namespace).await;
    // A namespace made by this request has the defaults: nothing to guess.
    let guessed = !sure && !created;
    // A request that sets no option changes nothing and writes nothing,
    // whatever is known; one that sets every option copies nothing from a
    // guess (and can repair a record that does not parse).
    let sets_any = request.write_mode.is_some() || request.history_max.is_some();
    let sets_all = request.write_mode.is_some() && request.history_max.is_some();
    if guessed && sets_any && !sets_all {
        // One record holds every option: written from a guess, it would
        // put back options someone else changed.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "settings_unknown",
            format!("namespace {ns:?}'s settings cannot be read right now (their partition is catching up or its holder does not answer); try again"),
        ));
    }
    let mut options = known;
    options.write_mode = request.write_mode.unwrap_or(options.write_mode);
    options.history_max = request.history_max.unwrap_or(options.history_max);
    // Written when it changes, or when the request sets the options and
    // what it would leave alone is a guess (the guess may be older than the
    // record; a record that does not parse is then replaced).
    if options != known || (guessed && sets_any) {
        state.node.write_namespace_options(&namespace, options).await?;
    }
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    let body = json!({
        "name": ns,
        "partitions": namespace.partitions,
        "created": created,
        "write_mode": options.write_mode,
        "history_max": options.history_max,
        "source_topic": namespace.source_topic.as_deref(),
    });
    Ok((status, Json(body)).into_response())
}

/// `DELETE /v1/ns/{ns}?confirm={ns}`: deletes the namespace, every record,
/// its log and its snapshots, on every node (`node/deletion.rs`). The name
/// repeated in `confirm` is the confirmation (a mistyped URL deletes
/// nothing): 400 `confirmation_required` without it, 404 no such
/// namespace, 200 deleted. Admin on the whole namespace only.
pub(super) async fn delete(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    require_all_of(&identity, &ns, "", Verb::Admin)?;
    let params = super::params::Params::parse(query.as_deref(), &["confirm"])?;
    if params.str("confirm") != Some(ns.as_str()) {
        return Err(ApiError::bad_request(
            "confirmation_required",
            format!(
                "deleting namespace {ns:?} removes every record in it, its log and its snapshots, on every node, for good; \
                 to confirm, repeat its name: DELETE /v1/ns/{ns}?confirm={ns}"
            ),
        ));
    }
    // On a task of its own: a client that goes away does not cut a
    // deletion short between its steps (the log deleted, the stores not).
    let node = state.node.clone();
    let name = ns.clone();
    let deleted = tokio::spawn(async move { node.delete_namespace(&name).await })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("the deletion failed: {e}")))?;
    let deleted = match deleted {
        Ok(Some(deleted)) => deleted,
        Ok(None) => return Err(ApiError::unknown_namespace(&ns)),
        Err(e @ DeleteError::OnSourceTopic { .. }) => return Err(ApiError::new(StatusCode::CONFLICT, "namespace_on_source_topic", e.to_string())),
        Err(DeleteError::Log(e)) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "log_unavailable",
                format!("the log did not delete the namespace's topic ({e}); nothing was deleted, retry"),
            ))
        }
    };
    let body = json!({
        "name": ns,
        "deleted": true,
        "partitions": deleted.partitions,
        "snapshot_objects_deleted": deleted.snapshot_objects,
        "snapshot_error": deleted.snapshot_error,
    });
    Ok(Json(body).into_response())
}

/// `GET /v1/ns`
/// Shows the namespaces the caller has some grant in (all to the root token).
pub(super) async fn list(State(state): State<AppState>, Caller(identity): Caller) -> Response {
    let namespaces: Vec<_> = state
        .node
        .namespaces()
        .iter()
        .filter(|n| may_see(&identity, &n.name))
        .map(|n| match &n.source_topic {
            Some(topic) => json!({ "name": &*n.name, "partitions": n.partitions, "source_topic": &**topic }),
            None => json!({ "name": &*n.name, "partitions": n.partitions }),
        })
        .collect();
    Json(json!({ "namespaces": namespaces })).into_response()
}

/// `GET /v1/ns/{ns}`: the namespace as this node sees it.
pub(super) async fn describe(State(state): State<AppState>, Caller(identity): Caller, NsName(ns): NsName) -> Result<Response, ApiError> {
    if !may_see(&identity, &ns) {
        require_anywhere(&identity, &ns, Verb::Read)?;
    }
    let namespace = state.node.namespace(&ns).ok_or_else(|| ApiError::unknown_namespace(&ns))?;
    let tps = namespace.handles.iter().map(|h| h.tp.clone()).collect();
    let log_offsets = log_offsets(state.node.log.clone(), tps).await;
    let mut partitions = Vec::with_capacity(namespace.handles.len());
    for (handle, (log_start, log_end)) in namespace.handles.iter().zip(log_offsets) {
        let (status, reason) = status_of(handle);
        let view = match handle.read_view() {
            Ok(view) => view,
            // Rebuilding, or its store failing: described without reading
            // it (issue 37: the whole answer was a 503 while one partition
            // rebuilt, and for good once one was refused while rebuilding).
            Err(e) if e.unavailable || e.damaged => {
                partitions.push(json!({
                    "partition": handle.partition,
                    "held": handle.is_held(),
                    "applied_offset": handle.applied_next() as i64 - 1,
                    "log_start_offset": log_start,
                    "log_end_offset": log_end,
                    // Unknown until its store can be read again.
                    "lag": Value::Null,
                    "status": status,
                    "reason": reason,
                    "store_error": e.message,
                    "staleness_ms": handle.staleness().map(|s| s.as_millis() as u64),
                }));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let store_state = view.reader.state()?;
        // Procedures (docs/procedures.md): the partition's log time and its
        // outbox's backlog, counted up to OUTBOX_COUNTED_MAX.
        let procedures = match view.reader.has_procedures()? {
            true => json!({
                "log_time_ms": view.reader.log_time_ms()?,
                "outbox_messages": view.reader.outbox_len(OUTBOX_COUNTED_MAX)?,
                // Only on the node publishing the partition (its publisher's lag).
                "unpublished_messages": state.node.publishes(&handle.tp).then(|| crate::metrics::outbox_unpublished(&ns, handle.partition)),
            }),
            false => Value::Null,
        };
        let fetch = state.node.log.fetch_source(&handle.tp);
        partitions.push(json!({
            "partition": handle.partition,
            "held": handle.is_held(),
            "applied_offset": store_state.applied_next as i64 - 1,
            "log_start_offset": log_start,
            "log_end_offset": log_end,
            "lag": log_end.map(|end| end.saturating_sub(store_state.applied_next)),
            "state_hash": store_state.state_hash.to_hex(),
            "status": status,
            "reason": reason,
            "records": store_state.record_count,
            "applied_entries": store_state.applied_entries,
            "skipped_entries": store_state.skipped_entries,
            "staleness_ms": handle.staleness().map(|s| s.as_millis() as u64),
            "log_leader": fetch.map(|f| f.leader),
            "fetching_from": fetch.map(|f| f.fetching_from),
            "procedures": procedures,
        }));
    }
    let options = state.node.namespace_options(&namespace).await;
    let body = json!({
        "name": &*namespace.name,
        "partitions": namespace.partitions,
        "write_mode": options.write_mode,
        "history_max": options.history_max,
        "source_topic": namespace.source_topic.as_deref(),
        "state": partitions,
    });
    Ok(Json(body).into_response())
}

/// Whether `identity` has any grant in `ns` (the system namespace: root only).
fn may_see(identity: &Identity, ns: &str) -> bool {
    match identity {
        Identity::Open | Identity::Root => true,
        _ => Verb::ALL.into_iter().any(|verb| identity.allows_anywhere(ns, verb).is_ok()),
    }
}

/// The whole describe waits at most this long for the log's offsets; a
/// partition whose offsets did not come by then shows `null` (the log is
/// unavailable) instead of holding the answer for partitions × timeouts.
const LOG_OFFSETS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// Offset requests in flight at once (each may be a broker round trip).
const LOG_OFFSET_REQUESTS_MAX: usize = 32;

/// `(start, end)` of each partition's log, asked concurrently, all within `LOG_OFFSETS_WAIT`.
async fn log_offsets(log: std::sync::Arc<dyn crate::log::Log>, tps: Vec<crate::log::TopicPartition>) -> Vec<(Option<u64>, Option<u64>)> {
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + LOG_OFFSETS_WAIT;
    futures::stream::iter(tps)
        .map(move |tp| {
            let log = log.clone();
            async move {
                // The end as lag counts it: past this node's own appends if
                // further (`Log::known_end`: a deposed leader's answer is old).
                let both = async { (log.start_offset(&tp).await.ok(), log.end_offset(&tp).await.ok().map(|end| end.max(log.known_end(&tp)))) };
                tokio::time::timeout_at(deadline, both).await.unwrap_or((None, None))
            }
        })
        .buffered(LOG_OFFSET_REQUESTS_MAX)
        .collect()
        .await
}

/// A partition's status as `GET /v1/ns/{ns}` names it, and why when it is
/// not serving (a blocked reader's reason too).
fn status_of(handle: &crate::partition::PartitionHandle) -> (&'static str, Option<String>) {
    let blocked = handle.blocked().map(|why| format!("blocked: {why}"));
    match handle.status() {
        PartitionStatus::Serving => ("serving", blocked),
        PartitionStatus::CatchingUp => match handle.rebuilding() {
            Some(why) => ("rebuilding", Some(why)),
            None => ("catching_up", blocked),
        },
        PartitionStatus::Refused(reason) => ("refused", Some(reason)),
        PartitionStatus::NotHeld => ("not_held", None),
    }
}
