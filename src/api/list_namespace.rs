//! Listing a whole namespace: `GET /v1/ns/{ns}/kv?prefix=&cursor=&limit=&partition=`,
//! its records in `(pk, sk)` order across every partition, a page at a time.
//!
//! Each partition's page comes from its store (`StoreReader::list_across_pks`)
//! on this node, or from its holder (the same request with `partition=P`,
//! forwarded), and the pages are merged. A partition that stopped early
//! (its scan bound) says how far it read; the merged page goes no further
//! than the least such point, so the next page misses nothing. Each
//! partition is read at its own applied offset (the answer's `position`
//! names them): a page is not one snapshot of the whole namespace.

use std::collections::BTreeMap;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde_json::json;

use super::keys::{namespace, NsName};
use super::params::Params;
use super::records::{partition_param, reads_here};
use super::render;
use super::render::json_response;
use crate::auth::{Identity, Verb};
use crate::edge::{no_holder, not_held, require, require_anywhere, send, to_holder, ApiError, AppState, Caller, Incoming};
use crate::limits;
use crate::node::read::await_consistency;
use crate::partition::Namespace;

/// Records one partition's page reads at most (a caller who may read few
/// of them gets short pages that still move on).
const SCANNED_PER_PARTITION_MAX: usize = 10_000;

/// One record of the merged page: its key and its rendered JSON.
struct Item {
    pk: String,
    sk: String,
    rendered: Vec<u8>,
}

/// One partition's page.
struct PartitionPage {
    items: Vec<Item>,
    /// How far the partition was read (None: to its end).
    read_to: Option<(String, String)>,
}

/// `GET /v1/ns/{ns}/kv`
pub(super) async fn list_namespace(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    require_anywhere(&identity, &ns, Verb::Read)?;
    let namespace = namespace(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["prefix", "cursor", "limit", "partition", "consistency", "timeout_ms"])?;
    let limit = params.u64("limit")?.map_or(limits::LIST_LIMIT_DEFAULT, |l| l as usize);
    if limit == 0 || limit > limits::LIST_LIMIT_MAX {
        return Err(ApiError::bad_request("invalid_parameter", format!("limit must be between 1 and {}, got {limit}", limits::LIST_LIMIT_MAX)));
    }
    let prefix = params.str("prefix").unwrap_or_default().to_string();
    if prefix.len() > limits::PK_BYTES_MAX {
        return Err(ApiError::bad_request(
            "key_too_large",
            format!("prefix is {} bytes; a pk is at most {} bytes", prefix.len(), limits::PK_BYTES_MAX),
        ));
    }
    let after = params.str("cursor").map(decode_cursor).transpose()?;
    let incoming = Incoming::new(Method::GET, &uri, &headers).by(&identity);
    let partitions: Vec<u32> = match partition_param(&namespace, params.str("partition"))? {
        Some(partition) if !reads_here(&state, &incoming, &namespace, partition) => {
            return to_holder(&state, &incoming, &namespace.name, partition, Bytes::new()).await;
        }
        Some(partition) => vec![partition],
        None => (0..namespace.partitions).collect(),
    };
    let (local, remote): (Vec<u32>, Vec<u32>) = partitions.iter().partition(|p| reads_here(&state, &incoming, &namespace, **p));
    let mut offsets = BTreeMap::new();
    let mut pages = Vec::with_capacity(partitions.len());
    if !remote.is_empty() {
        match remote_pages(&state, &incoming, &namespace.name, &remote, &prefix, params.str("cursor"), limit, query.as_deref()).await {
            Ok(fetched) => {
                for (page, position) in fetched {
                    pages.push(page);
                    offsets.extend(position);
                }
            }
            Err(response) => return Ok(response),
        }
    }
    await_consistency(&state.node, &namespace, &local, &params.consistency()?, params.timeout()?).await?;
    let after = after.as_ref().map(|(pk, sk)| (pk.as_str(), sk.as_str()));
    for &partition in &local {
        let (page, applied_next) = local_page(&identity, &namespace, partition, &prefix, after, limit)?;
        offsets.insert(partition, applied_next);
        pages.push(page);
    }
    let (items, next) = merge(pages, limit);
    let rendered: Vec<Option<&[u8]>> = items.iter().map(|item| Some(item.rendered.as_slice())).collect();
    let position = crate::position::Position { namespace: namespace.name.to_string(), offsets }.to_string();
    let next_cursor = next.map(|(pk, sk)| encode_cursor(&pk, &sk));
    Ok(json_response(StatusCode::OK, render::rendered_items(&rendered, &[("next_cursor", json!(next_cursor)), ("position", json!(position))])))
}

/// One partition's page from its store here, and the offset it was read at.
fn local_page(
    identity: &Identity,
    namespace: &Namespace,
    partition: u32,
    prefix: &str,
    after: Option<(&str, &str)>,
    limit: usize,
) -> Result<(PartitionPage, u64), ApiError> {
    let view = namespace.handle(partition).read_view()?;
    let may_read = |pk: &str| require(identity, &namespace.name, pk, Verb::Read).is_ok();
    let page = view.reader.list_across_pks(prefix, after, limit, SCANNED_PER_PARTITION_MAX.max(limit), limits::ANSWER_BYTES_MAX, &may_read)?;
    let items = page
        .records
        .into_iter()
        .map(|record| {
            let mut rendered = Vec::with_capacity(record.value.len() + 64);
            render::record(&mut rendered, &record);
            Item { pk: record.pk, sk: record.sk, rendered }
        })
        .collect();
    Ok((PartitionPage { items, read_to: page.read_to }, view.applied_next))
}

/// The first `limit` items of the partitions' pages in `(pk, sk)` order, no
/// further than any partition read; and where the next page starts (None:
/// nothing is left).
fn merge(pages: Vec<PartitionPage>, limit: usize) -> (Vec<Item>, Option<(String, String)>) {
    // Past the least point a partition read to, it may hold records unseen.
    let bound = pages.iter().filter_map(|page| page.read_to.clone()).min();
    let mut items: Vec<Item> = pages.into_iter().flat_map(|page| page.items).collect();
    items.sort_by(|a, b| (&a.pk, &a.sk).cmp(&(&b.pk, &b.sk)));
    if let Some(bound) = &bound {
        items.retain(|item| (&item.pk, &item.sk) <= (&bound.0, &bound.1));
    }
    if items.len() >= limit {
        items.truncate(limit);
        let last = items.last().map(|item| (item.pk.clone(), item.sk.clone()));
        return (items, last);
    }
    (items, bound)
}

/// The pages of partitions this node does not read, each asked of its
/// holder as the same listing with `partition=P` (concurrently). Any
/// holder's error is the whole answer (relayed as the holder sent it).
#[allow(clippy::too_many_arguments)]
async fn remote_pages(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &str,
    remote: &[u32],
    prefix: &str,
    cursor: Option<&str>,
    limit: usize,
    query: Option<&str>,
) -> Result<Vec<(PartitionPage, BTreeMap<u32, u64>)>, Response> {
    if let Some(from) = incoming.forwarded_by {
        return Err(not_held(state, namespace, remote[0], from).into_response());
    }
    let consistency = query.map(|q| Params::parse(Some(q), &["prefix", "cursor", "limit", "partition", "consistency", "timeout_ms"]).ok());
    let passed: String = consistency
        .flatten()
        .map(|params| ["consistency", "timeout_ms"].iter().filter_map(|name| params.str(name).map(|v| format!("&{name}={}", encode(v)))).collect())
        .unwrap_or_default();
    let mut requests = Vec::with_capacity(remote.len());
    for &partition in remote {
        let Some(holder) = state.cluster.holders(namespace, partition).into_iter().next() else {
            return Err(no_holder(state, namespace, partition).into_response());
        };
        let mut path = format!("/v1/ns/{}/kv?partition={partition}&limit={limit}&prefix={}", encode(namespace), encode(prefix));
        if let Some(cursor) = cursor {
            path.push_str(&format!("&cursor={}", encode(cursor)));
        }
        path.push_str(&passed);
        requests.push(async move {
            let sub = Incoming {
                method: Method::GET,
                path_and_query: &path,
                forwarded_by: None,
                idempotency_key: None,
                headers: incoming.headers,
                principal: None,
            };
            let response = send(state, &holder, &sub, Bytes::new()).await;
            (holder, partition, response)
        });
    }
    let mut pages = Vec::with_capacity(remote.len());
    for (holder, partition, response) in futures::future::join_all(requests).await {
        let holder_error = |message: String| ApiError::new(StatusCode::BAD_GATEWAY, "holder_error", message).into_response();
        let response = response.map_err(|e| {
            crate::metrics::FORWARD_FAILURES.inc();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "holder_unreachable",
                format!("listing partition {partition} of namespace {namespace:?} at {} ({}) failed: {e}; retry", holder.id, holder.api),
            )
            .into_response()
        })?;
        if response.status() != StatusCode::OK {
            return Err(response);
        }
        let body = axum::body::to_bytes(response.into_body(), limits::ANSWER_BYTES_MAX + (1 << 20))
            .await
            .map_err(|e| holder_error(format!("reading {}'s answer: {e}", holder.id)))?;
        let page = remote_page(&body).map_err(|why| holder_error(format!("{} answered a listing of partition {partition} with {why}", holder.id)))?;
        pages.push(page);
    }
    Ok(pages)
}

/// A holder's answer: its items (kept as rendered), how far it read, its offsets.
fn remote_page(body: &[u8]) -> Result<(PartitionPage, BTreeMap<u32, u64>), String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        items: Vec<Box<serde_json::value::RawValue>>,
        next_cursor: Option<String>,
        position: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Key {
        pk: String,
        sk: String,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|e| format!("unexpected JSON: {e}"))?;
    let mut items = Vec::with_capacity(answer.items.len());
    for item in answer.items {
        let key: Key = serde_json::from_str(item.get()).map_err(|e| format!("an item without its key: {e}"))?;
        items.push(Item { pk: key.pk, sk: key.sk, rendered: item.get().as_bytes().to_vec() });
    }
    let read_to = answer.next_cursor.as_deref().map(decode_cursor).transpose().map_err(|e| format!("a cursor it cannot have made: {}", e.message))?;
    let offsets = answer.position.as_deref().and_then(|p| crate::position::Position::parse(p).ok()).map(|p| p.offsets).unwrap_or_default();
    Ok((PartitionPage { items, read_to }, offsets))
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Cursors (`cursor` / `next_cursor`) are opaque: base64url of the JSON
/// `[pk, sk]` of the last record a page covers.
fn encode_cursor(pk: &str, sk: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(&(pk, sk)).expect("strings serialize"))
}

fn decode_cursor(cursor: &str) -> Result<(String, String), ApiError> {
    let invalid = || ApiError::bad_request("invalid_cursor", "cursor is not one this server returned; pass next_cursor exactly");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
    let (pk, sk): (String, String) = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    limits::check_pk(&pk).map_err(|_| invalid())?;
    limits::check_sk(&sk).map_err(|_| invalid())?;
    Ok((pk, sk))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(keys: &[(&str, &str)], read_to: Option<(&str, &str)>) -> PartitionPage {
        PartitionPage {
            items: keys.iter().map(|(pk, sk)| Item { pk: pk.to_string(), sk: sk.to_string(), rendered: Vec::new() }).collect(),
            read_to: read_to.map(|(pk, sk)| (pk.to_string(), sk.to_string())),
        }
    }

    fn keys(items: &[Item]) -> Vec<(&str, &str)> {
        items.iter().map(|item| (item.pk.as_str(), item.sk.as_str())).collect()
    }

    /// A merged page never passes the least point a partition read to
    /// (past it, that partition may hold records not yet seen), and
    /// continues from its last item when full.
    #[test]
    fn a_merged_page_stops_where_the_least_read_partition_stopped() {
        let (items, next) = merge(vec![page(&[("a", ""), ("d", "")], None), page(&[("b", ""), ("c", "")], Some(("c", "")))], 10);
        assert_eq!(keys(&items), [("a", ""), ("b", ""), ("c", "")], "d lies past where partition 2 stopped");
        assert_eq!(next, Some(("c".to_string(), String::new())));
        let (items, next) = merge(vec![page(&[("a", ""), ("d", "")], None), page(&[("b", "")], None)], 2);
        assert_eq!(keys(&items), [("a", ""), ("b", "")]);
        assert_eq!(next, Some(("b".to_string(), String::new())), "full: on from the last item");
        let (items, next) = merge(vec![page(&[("a", "")], None), page(&[], None)], 2);
        assert_eq!((keys(&items), next), (vec![("a", "")], None), "all read: no cursor");
    }

    #[test]
    fn a_cursor_round_trips_and_a_made_up_one_is_refused() {
        let cursor = encode_cursor("pk/é \"x\"", "");
        assert_eq!(decode_cursor(&cursor).unwrap(), ("pk/é \"x\"".to_string(), String::new()));
        for bad in ["", "not base64!", &base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b"[\"\",\"\"]")] {
            assert_eq!(decode_cursor(bad).unwrap_err().code, "invalid_cursor", "{bad:?}");
        }
    }
}
