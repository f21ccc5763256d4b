//! Listing a whole namespace: `GET /v1/ns/{ns}/kv?prefix=&cursor=&limit=&page_bytes=&partition=`,
//! its records in `(pk, sk)` order across every partition, a page at a time.
//!
//! Each partition's page comes from its store (`StoreReader::list_across_pks`)
//! on this node, or from its holder (the same request with `partition=P`,
//! forwarded), and the pages are merged. A partition that stopped early
//! (its scan or byte bound) says how far it read; the merged page goes no
//! further than the least such point, so the next page misses nothing.
//! Each partition is read at its own applied offset (the answer's
//! `position` names them): a page is not one snapshot of the whole namespace.
//!
//! Who may list: read on all of the namespace under `prefix` (carve-outs
//! included). Nothing in the scanned range is then hidden from the caller,
//! so no cursor can name a key it may not read.

use std::collections::BTreeMap;
use std::sync::Arc;

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
use crate::auth::Verb;
use crate::edge::{require_all_of, to_holder, ApiError, AppState, Caller, Incoming};
use crate::limits;
use crate::node::read::{await_consistency, check_position};
use crate::partition::Namespace;

/// Records one partition's page reads at most.
const SCANNED_PER_PARTITION_MAX: usize = 10_000;

/// Holders asked for their partitions' pages at once, at most.
const REMOTE_PAGES_IN_FLIGHT_MAX: usize = 16;

/// The least bytes of records a page may be asked to hold.
const PAGE_BYTES_MIN: usize = 1024;

/// The query parameters this call takes.
const PARAMETERS: &[&str] = &["prefix", "cursor", "limit", "page_bytes", "partition", "after", "consistency", "timeout_ms"];

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

/// What a page asks for.
struct PageAsk {
    prefix: String,
    after: Option<(String, String)>,
    limit: usize,
    /// Bytes of rendered records the whole page holds at most (at least one record).
    bytes_max: usize,
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
    let params = Params::parse(query.as_deref(), PARAMETERS)?;
    let ask = page_ask(&params)?;
    require_all_of(&identity, &ns, &ask.prefix, Verb::Read).map_err(|e| {
        let hint = "; list with a prefix your token may read all of, or read single pks";
        ApiError::new(e.status, e.code, format!("{}{hint}", e.message))
    })?;
    let namespace = namespace(&state, &ns)?;
    let incoming = Incoming::new(Method::GET, &uri, &headers).by(&identity);
    let consistency = params.consistency()?;
    let partitions: Vec<u32> = match partition_param(&namespace, params.str("partition"))? {
        Some(partition) if !reads_here(&state, &incoming, &namespace, partition) => {
            return to_holder(&state, &incoming, &namespace.name, partition, Bytes::new()).await;
        }
        Some(partition) => vec![partition],
        None => (0..namespace.partitions).collect(),
    };
    check_position(&namespace, &consistency, &partitions, incoming.forwarded_by.is_some())?;
    let (local, remote): (Vec<u32>, Vec<u32>) = partitions.iter().partition(|p| reads_here(&state, &incoming, &namespace, **p));
    // Each partition's share of the page's bytes (at least one record each).
    let share = (ask.bytes_max / partitions.len()).max(PAGE_BYTES_MIN);
    let mut offsets = BTreeMap::new();
    let mut pages = Vec::with_capacity(partitions.len());
    // One wait for the whole listing: the holders', then this node's.
    let deadline = tokio::time::Instant::now() + params.timeout()?;
    let asks = remote.into_iter().map(|partition| {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        remote_page(&state, &incoming, &namespace.name, partition, &ask, share, query.as_deref(), wait)
    });
    let fetched: Vec<_> = futures::StreamExt::collect(futures::StreamExt::buffered(futures::stream::iter(asks), REMOTE_PAGES_IN_FLIGHT_MAX)).await;
    for fetched in fetched {
        // A holder's error is the whole answer, relayed as it sent it.
        match fetched {
            Ok((page, position)) => {
                pages.push(page);
                offsets.extend(position);
            }
            Err(response) => return Ok(response),
        }
    }
    await_consistency(&state.node, &namespace, &local, &consistency, deadline.saturating_duration_since(tokio::time::Instant::now())).await?;
    let read = {
        let (namespace, ask) = (namespace.clone(), (ask.prefix.clone(), ask.after.clone(), ask.limit));
        tokio::task::spawn_blocking(move || local_pages(&namespace, &local, &ask.0, ask.1.as_ref(), ask.2, share)).await
    };
    let local_pages =
        read.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("reading the partitions failed: {e}")))??;
    for (partition, page, applied_next) in local_pages {
        offsets.insert(partition, applied_next);
        pages.push(page);
    }
    let (items, next) = merge(pages, ask.limit, ask.bytes_max);
    let rendered: Vec<Option<&[u8]>> = items.iter().map(|item| Some(item.rendered.as_slice())).collect();
    let position = crate::position::Position { namespace: namespace.name.to_string(), offsets }.to_string();
    let next_cursor = next.map(|(pk, sk)| encode_cursor(&pk, &sk));
    Ok(json_response(StatusCode::OK, render::rendered_items(&rendered, &[("next_cursor", json!(next_cursor)), ("position", json!(position))])))
}

/// The page asked for, its parameters checked.
fn page_ask(params: &Params) -> Result<PageAsk, ApiError> {
    let limit = params.list_limit()?;
    let bytes_max = params.u64("page_bytes")?.map_or(limits::ANSWER_BYTES_MAX, |b| b as usize);
    if !(PAGE_BYTES_MIN..=limits::ANSWER_BYTES_MAX).contains(&bytes_max) {
        return Err(ApiError::bad_request(
            "invalid_parameter",
            format!("page_bytes must be between {PAGE_BYTES_MIN} and {}, got {bytes_max}", limits::ANSWER_BYTES_MAX),
        ));
    }
    let prefix = params.str("prefix").unwrap_or_default().to_string();
    if prefix.len() > limits::PK_BYTES_MAX {
        let message = format!("prefix is {} bytes; a pk is at most {} bytes", prefix.len(), limits::PK_BYTES_MAX);
        return Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "key_too_large", message));
    }
    let after = params.str("cursor").map(decode_cursor).transpose()?;
    Ok(PageAsk { prefix, after, limit, bytes_max })
}

/// The pages of `partitions` from their stores here (on a blocking
/// thread: up to `SCANNED_PER_PARTITION_MAX` records each), with the
/// offset each was read at.
fn local_pages(
    namespace: &Arc<Namespace>,
    partitions: &[u32],
    prefix: &str,
    after: Option<&(String, String)>,
    limit: usize,
    bytes_max: usize,
) -> Result<Vec<(u32, PartitionPage, u64)>, ApiError> {
    let after = after.map(|(pk, sk)| (pk.as_str(), sk.as_str()));
    let mut pages = Vec::with_capacity(partitions.len());
    for &partition in partitions {
        let view = namespace.handle(partition).read_view()?;
        let page = view.reader.list_across_pks(prefix, after, limit, SCANNED_PER_PARTITION_MAX.max(limit), bytes_max, &|_| true)?;
        let items = page
            .records
            .into_iter()
            .map(|record| {
                let mut rendered = Vec::with_capacity(record.value.len() + 64);
                render::record(&mut rendered, &record);
                Item { pk: record.pk, sk: record.sk, rendered }
            })
            .collect();
        pages.push((partition, PartitionPage { items, read_to: page.read_to }, view.applied_next));
    }
    Ok(pages)
}

/// The first items of the partitions' pages in `(pk, sk)` order: at most
/// `limit`, and no more rendered bytes than `bytes_max` (at least one); no
/// further than any partition read. And where the next page starts (None:
/// nothing is left).
fn merge(pages: Vec<PartitionPage>, limit: usize, bytes_max: usize) -> (Vec<Item>, Option<(String, String)>) {
    // Past the least point a partition read to, it may hold records unseen.
    let bound = pages.iter().filter_map(|page| page.read_to.clone()).min();
    let mut items: Vec<Item> = pages.into_iter().flat_map(|page| page.items).collect();
    items.sort_by(|a, b| (&a.pk, &a.sk).cmp(&(&b.pk, &b.sk)));
    if let Some(bound) = &bound {
        items.retain(|item| (&item.pk, &item.sk) <= (&bound.0, &bound.1));
    }
    let mut bytes = 0usize;
    let fits = items
        .iter()
        .position(|item| {
            bytes += item.rendered.len() + 1;
            bytes > bytes_max
        })
        .map_or(items.len(), |over| over.max(1));
    let kept = fits.min(limit);
    if kept < items.len() {
        items.truncate(kept);
        let last = items.last().map(|item| (item.pk.clone(), item.sk.clone()));
        return (items, last);
    }
    (items, bound)
}

/// The page of a partition this node does not read, asked of its holder as
/// the same listing with `partition=P` (its share of the page's bytes, and
/// what is left of the listing's wait); its items, how far it read and its
/// offset.
#[allow(clippy::too_many_arguments)]
async fn remote_page(
    state: &AppState,
    incoming: &Incoming<'_>,
    namespace: &str,
    partition: u32,
    ask: &PageAsk,
    share: usize,
    query: Option<&str>,
    wait: std::time::Duration,
) -> Result<(PartitionPage, BTreeMap<u32, u64>), Response> {
    let mut path =
        format!("/v1/ns/{}/kv?partition={partition}&limit={}&page_bytes={share}&prefix={}", encode(namespace), ask.limit, encode(&ask.prefix));
    if let Some((pk, sk)) = &ask.after {
        path.push_str(&format!("&cursor={}", encode(&encode_cursor(pk, sk))));
    }
    // The read's own wait goes on with it: what is left of it.
    if let Some(params) = query.and_then(|q| Params::parse(Some(q), PARAMETERS).ok()) {
        for name in ["after", "consistency"] {
            if let Some(value) = params.str(name) {
                path.push_str(&format!("&{name}={}", encode(value)));
            }
        }
    }
    path.push_str(&format!("&timeout_ms={}", wait.as_millis()));
    let sub = Incoming {
        method: Method::GET,
        path_and_query: &path,
        forwarded_by: None,
        idempotency_key: None,
        headers: incoming.headers,
        principal: None,
    };
    // `to_holder` tries the next holder when one no longer holds it.
    let response = to_holder(state, &sub, namespace, partition, Bytes::new()).await.map_err(IntoResponse::into_response)?;
    let holder_error = |message: String| ApiError::new(StatusCode::BAD_GATEWAY, "holder_error", message).into_response();
    if response.status() != StatusCode::OK {
        return Err(response);
    }
    // `send` already read the body within its own bound.
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.map_err(|e| holder_error(format!("reading a holder's answer: {e}")))?;
    parse_page(&body).map_err(|why| holder_error(format!("a holder answered a listing of partition {partition} with {why}")))
}

/// A holder's answer: its items (kept as rendered), how far it read, its offsets.
fn parse_page(body: &[u8]) -> Result<(PartitionPage, BTreeMap<u32, u64>), String> {
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
        let (items, next) = merge(vec![page(&[("a", ""), ("d", "")], None), page(&[("b", ""), ("c", "")], Some(("c", "")))], 10, usize::MAX);
        assert_eq!(keys(&items), [("a", ""), ("b", ""), ("c", "")], "d lies past where partition 2 stopped");
        assert_eq!(next, Some(("c".to_string(), String::new())));
        let (items, next) = merge(vec![page(&[("a", ""), ("d", "")], None), page(&[("b", "")], None)], 2, usize::MAX);
        assert_eq!(keys(&items), [("a", ""), ("b", "")]);
        assert_eq!(next, Some(("b".to_string(), String::new())), "full: on from the last item");
        let (items, next) = merge(vec![page(&[("a", "")], None), page(&[], None)], 2, usize::MAX);
        assert_eq!((keys(&items), next), (vec![("a", "")], None), "all read: no cursor");
        // The answer's bytes: cut after the last item that fits (at least one), on from there.
        let sized = |keys: &[&str], bytes: usize| PartitionPage {
            items: keys.iter().map(|pk| Item { pk: pk.to_string(), sk: String::new(), rendered: vec![b' '; bytes] }).collect(),
            read_to: None,
        };
        let (items, next) = merge(vec![sized(&["a", "c"], 99), sized(&["b", "d"], 99)], 10, 250);
        assert_eq!(keys(&items), [("a", ""), ("b", "")], "two of 100 bytes fit in 250");
        assert_eq!(next, Some(("b".to_string(), String::new())));
        let (items, _) = merge(vec![sized(&["a"], 1000)], 10, 250);
        assert_eq!(keys(&items), [("a", "")], "one record, whatever its size: a page always moves on");
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
