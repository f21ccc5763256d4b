//! Query indexes: a query walks an ordered index of the location's children
//! (`tree::index`) and reads only the children it selects, instead of
//! reading and sorting them all.
//!
//! An index is this node's, in memory, built the first time a query needs
//! it (`$key` and `$priority` always; a child or `.value` when `.indexOn`
//! names it, which the query checked) from one read of the location, and
//! kept current from the partition's recent events (the fan-out ring,
//! `PartitionFeed::ring_chunk`): a later query at a newer position re-reads
//! just the children the events in between touched. It is rebuilt when
//! that is not possible — the ring no longer has the events, a write
//! replaced the location or something above it, or too many children
//! changed. Every answer comes from one read view: the index is brought to
//! exactly the view's position first; a query whose view is older than the
//! index (another query moved it on meanwhile) reads the location instead.
//!
//! Bounds: `INDEX_ENTRIES_MAX` entries over all indexes (the least recently
//! used go first; a location with more children than that is never
//! indexed: its queries read it, as without an index); `CHILDREN_UPDATED_MAX`
//! children re-read per refresh; `RING_WAIT_YIELDS_MAX` yields waiting for
//! the ring to have the view's events.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::fanout::event::Kind;
use crate::fanout::event::Mark;
use crate::fanout::Event;
use crate::partition::{Namespace, PartitionHandle, ReadView};
use crate::store::tree::{value_at, TreeError, READ_BYTES_MAX};
use crate::tree::index::Index;
use crate::tree::path::{self, Relation};
use crate::tree::query::{self, Query};
use crate::tree::value::strip_priorities;
use crate::tree::TREE_PK;

/// Entries of all of this node's indexes together (~100-200 bytes each).
pub const INDEX_ENTRIES_MAX: usize = 1_000_000;
/// Children one refresh re-reads at most; more changed: rebuild.
const CHILDREN_UPDATED_MAX: usize = 4_096;
/// Events read from the ring per step of a refresh.
const EVENTS_PER_CHUNK: usize = 1_024;
/// The apply loop publishes a position a moment before it appends that
/// batch's events to the ring; a query waits this many yields for them.
const RING_WAIT_YIELDS_MAX: usize = 64;

/// This node's indexes.
#[derive(Default)]
pub struct Indexes {
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// Each index, with the entries it was last counted at.
    by_id: HashMap<IndexId, (Arc<Slot>, usize)>,
    /// The sum of the counts in `by_id`.
    entries: usize,
    /// Advances with every use: the least recently used index is evicted first.
    clock: u64,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct IndexId {
    /// The tree partition's handle (its address): a namespace made again
    /// under the same name has a new one.
    handle: usize,
    location: String,
    order_by: String,
}

/// One index. The cache's lock is never held while a slot's is waited for
/// (a build reads a whole location): `last_used` is outside the slot's lock.
struct Slot {
    last_used: AtomicU64,
    cached: Mutex<Cached>,
}

struct Cached {
    /// The index as of `built_next` (the partition's position); none until built.
    index: Option<Index>,
    built_next: u64,
}

/// What the events since an index's position did to its location.
enum Touched {
    Children(HashSet<String>),
    /// A write at or above the location, too many children, or events the
    /// ring no longer has: read the whole location again.
    Everything,
}

impl Indexes {
    /// Runs `query` at `sk` on `view`: the selected children, as
    /// `query::run` on the whole location would select them, with their
    /// priorities when `priorities` (the realtime protocol sends them). A
    /// query with key tie-breaks (`startAt(value, key)`) runs on the
    /// location's value: an index walks sort values only.
    pub async fn run(
        &self,
        namespace: &Namespace,
        view: &Arc<ReadView>,
        sk: &str,
        query: &Query,
        priorities: bool,
    ) -> Result<Vec<(String, Value)>, TreeError> {
        if query.start_name.is_some() || query.end_name.is_some() {
            return run_on_location(view, sk, query, priorities);
        }
        let handle = namespace.handle(namespace.partition_of(TREE_PK));
        wait_for_ring(handle, view.applied_next).await;
        let id = IndexId { handle: Arc::as_ptr(handle) as usize, location: sk.to_string(), order_by: format!("{:?}", query.order_by) };
        let slot = self.slot(&id);
        // Building or moving an index may read the whole location: done on
        // a blocking thread, never holding the slot's lock on a runtime
        // thread (other tasks would stall behind it).
        let (selected, entries) = {
            let task = {
                let (slot, handle, view, sk, query) = (slot.clone(), handle.clone(), view.clone(), sk.to_string(), query.clone());
                tokio::task::spawn_blocking(move || {
                    let mut cached = slot.cached.lock();
                    let selected = if cached.index.is_some() && cached.built_next > view.applied_next {
                        None // moved past this view by another query: read the location
                    } else {
                        bring_to(&mut cached, &handle, &view, &sk, &query.order_by)?;
                        cached.index.as_ref().map(|index| index.select(&query))
                    };
                    Ok::<_, TreeError>((selected, cached.index.as_ref().map_or(0, Index::len)))
                })
            };
            let built = task.await;
            match built {
                Ok(built) => built?,
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    // Cancelled (the runtime stops): read the location itself.
                    Err(_) => return run_on_location(view, sk, query, priorities),
                },
            }
        };
        self.account(&id, &slot, entries);
        match selected {
            Some(keys) => read_children(view, sk, keys, priorities),
            None => run_on_location(view, sk, query, priorities),
        }
    }

    /// The slot of `id`, made if new, marked used now.
    fn slot(&self, id: &IndexId) -> Arc<Slot> {
        let mut cache = self.cache.lock();
        cache.clock += 1;
        let clock = cache.clock;
        let (slot, _) = cache
            .by_id
            .entry(id.clone())
            .or_insert_with(|| (Arc::new(Slot { last_used: AtomicU64::new(clock), cached: Mutex::new(Cached { index: None, built_next: 0 }) }), 0));
        slot.last_used.store(clock, Ordering::Relaxed);
        slot.clone()
    }

    /// Counts `slot`'s `entries`, then evicts the least recently used
    /// indexes while all of them hold more than `INDEX_ENTRIES_MAX` (an
    /// evicted index's memory goes with its last user).
    fn account(&self, id: &IndexId, slot: &Arc<Slot>, entries: usize) {
        let mut cache = self.cache.lock();
        let cache = &mut *cache;
        if let Some((current, counted)) = cache.by_id.get_mut(id) {
            if Arc::ptr_eq(current, slot) {
                cache.entries = cache.entries - *counted + entries;
                *counted = entries;
            }
        }
        while cache.entries > INDEX_ENTRIES_MAX {
            let Some(victim) = cache.by_id.iter().min_by_key(|(_, (s, _))| s.last_used.load(Ordering::Relaxed)).map(|(id, _)| id.clone()) else {
                break;
            };
            if let Some((_, counted)) = cache.by_id.remove(&victim) {
                cache.entries -= counted;
            }
        }
        debug_assert_eq!(cache.entries, cache.by_id.values().map(|(_, n)| n).sum::<usize>());
        crate::metrics::FIREBASE_INDEX_ENTRIES.set(cache.entries as i64);
    }
}

/// Waits (a few yields at most) until the ring has the events below `position`.
async fn wait_for_ring(handle: &PartitionHandle, position: u64) {
    for _ in 0..RING_WAIT_YIELDS_MAX {
        if handle.feed.appended_next() >= position {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Brings the index to exactly `view`'s position: built if it is not,
/// refreshed from the ring's events if it is behind, rebuilt if they do
/// not tell enough.
fn bring_to(cached: &mut Cached, handle: &PartitionHandle, view: &ReadView, sk: &str, order_by: &query::OrderBy) -> Result<(), TreeError> {
    let target = view.applied_next;
    if let Some(index) = cached.index.as_mut() {
        if cached.built_next == target {
            return Ok(());
        }
        if let Touched::Children(keys) = touched(handle, sk, cached.built_next, target) {
            crate::metrics::FIREBASE_INDEX_CHILDREN_UPDATED.inc_by(keys.len() as u64);
            for key in keys {
                let child = value_at(&view.reader, TREE_PK, &path::join(sk, &key), true, READ_BYTES_MAX)?;
                index.set(&key, Some(&child));
            }
            cached.built_next = target;
            return Ok(());
        }
    }
    cached.index = None;
    let location = value_at(&view.reader, TREE_PK, sk, true, READ_BYTES_MAX)?;
    if query::children_count(&location) <= INDEX_ENTRIES_MAX {
        cached.index = Some(Index::build(order_by.clone(), location));
        cached.built_next = target;
        crate::metrics::FIREBASE_INDEX_BUILDS.inc();
    }
    Ok(())
}

/// The children of `sk` the partition's events in `[from, to)` touched.
fn touched(handle: &PartitionHandle, sk: &str, from: u64, to: u64) -> Touched {
    let mut keys = HashSet::new();
    let mut at = from;
    while at < to {
        let Some(chunk) = handle.feed.ring_chunk(Mark { offset: at, ops_done: 0 }, to, EVENTS_PER_CHUNK) else {
            return Touched::Everything; // the ring moved past `at`
        };
        if chunk.reached <= at {
            return Touched::Everything; // the ring does not have them yet
        }
        for event in &chunk.events {
            if event.pk.as_ref() == TREE_PK && !children_touched(sk, event, &mut keys) {
                return Touched::Everything;
            }
        }
        if keys.len() > CHILDREN_UPDATED_MAX {
            return Touched::Everything;
        }
        at = chunk.reached;
    }
    Touched::Children(keys)
}

/// Adds to `keys` the children of `sk` that `event` wrote; false when it
/// wrote `sk` itself or above it (every child may have changed).
fn children_touched(sk: &str, event: &Event, keys: &mut HashSet<String>) -> bool {
    let mut one = |target: &str| match path::relation(sk, target) {
        Relation::Unrelated => true,
        Relation::Same | Relation::Ancestor => false,
        Relation::Descendant => {
            let relative = path::relative(sk, target);
            keys.insert(relative.split('/').next().unwrap_or(relative).to_string());
            true
        }
    };
    match event.kind {
        Kind::TreeMerge if matches!(path::relation(sk, &event.sk), Relation::Same | Relation::Ancestor) => {
            // An update at or above the location: each of its paths.
            let Value::Object(update) = super::event_value(event) else { return false };
            update.keys().all(|relative| match path::parse_relative(relative) {
                Ok(parts) => one(&path::join(&event.sk, &path::sk_of(&parts))),
                Err(_) => false,
            })
        }
        _ => one(&event.sk),
    }
}

/// The values of the selected children, read from `view` (as `query::run`
/// gives them: read with priorities, then without them).
/// `query` run on the location's whole value (read with priorities); the
/// rows keep theirs when `priorities`.
pub fn run_on_location(view: &ReadView, sk: &str, query: &Query, priorities: bool) -> Result<Vec<(String, Value)>, TreeError> {
    let whole = value_at(&view.reader, TREE_PK, sk, true, READ_BYTES_MAX)?;
    if !priorities {
        return Ok(query::run(query, whole));
    }
    let mut rows = query::run(query, whole.clone());
    crate::tree::value::with_priorities(&mut rows, &whole);
    Ok(rows)
}

fn read_children(view: &ReadView, sk: &str, keys: Vec<String>, priorities: bool) -> Result<Vec<(String, Value)>, TreeError> {
    let mut rows = Vec::with_capacity(keys.len());
    let mut bytes = 0usize;
    for key in keys {
        let mut child = value_at(&view.reader, TREE_PK, &path::join(sk, &key), true, READ_BYTES_MAX)?;
        if !priorities {
            strip_priorities(&mut child);
        }
        bytes += child.to_string().len();
        if bytes > READ_BYTES_MAX {
            return Err(TreeError::TooLarge { bytes_max: READ_BYTES_MAX });
        }
        rows.push((key, child));
    }
    Ok(rows)
}
