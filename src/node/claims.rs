//! Replaying the journals of lost nodes (issue 19, the slow path).
//!
//! A node keeps a copy of its journal in object storage
//! (`journal::objects`) and renews a lease beside it. When a journal's
//! lease has not been renewed for `journal_claim_after` (its node is gone,
//! or came back with a new data directory and so a new journal), or a
//! journal has had no lease for as long, any node that scans the store
//! claims it, appends its entries to the log in journal order, waits until
//! it sees them applied, and only then deletes the objects it read; then it
//! retires the claim, and the lease unless the owner wrote it since (it
//! came back: `finish`).
//!
//! Every journaled write carries its place in its journal's lane, and the
//! apply loop applies a lane in order, each offset once, so a journal
//! replayed twice (two claimers, a claimer that stopped half-way, or an
//! owner that comes back with its data directory and sequences its local
//! journal too) is applied once, however late: no window. A claim only
//! saves work.
//!
//! A claimer that finds, once claimed, the lease renewed within
//! `journal_claim_after` leaves the journal to its owner (it came back
//! between the scan's look and the plan's). A journal whose replay would
//! fail the same way again (a gap, a namespace gone, entries not seen
//! applied: `ReplayError::Lasting`) is tried again at growing intervals
//! (`Retries`): its entries are not appended again at every scan; one the
//! log or the store failed is tried at the next scan.
//!
//! Bounds: one journal at a time; `APPENDS_IN_FLIGHT_MAX` appends in
//! flight; `APPLIED_WAIT_MAX` for an object's entries to be seen applied
//! (else the object stays, and a later scan tries again);
//! `RETRY_DELAY_MAX` between two tries of a journal that fails.

use std::collections::BTreeMap;
use std::sync::Weak;
use std::time::Duration;

use futures::StreamExt;

use super::ripcord_host::RipcordHost;
use super::Node;
use crate::journal::objects::{now_ms, Entry, JournalObjects, Lease};
use crate::log::LogError;
use object_store::path::Path as ObjectPath;

/// Appends of a claimed journal handed to the log at once, in order.
const APPENDS_IN_FLIGHT_MAX: usize = 256;
/// How long a replayed object's entries may take to be seen applied.
const APPLIED_WAIT_MAX: Duration = Duration::from_secs(60);
const APPLIED_POLL: Duration = Duration::from_millis(50);
/// Scans are at most this far apart (and at most `claim_after` / 2).
const SCAN_INTERVAL_MAX: Duration = Duration::from_secs(30);
/// A journal whose replay failed waits the scan interval times 2^failures
/// before it is tried again, at most this long.
const RETRY_DELAY_MAX: Duration = Duration::from_secs(600);

/// Scans the journals in `objects` every so often and replays lost ones.
pub(super) async fn run(
    node: Weak<Node>,
    objects: JournalObjects,
    own: String,
    claim_after: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let interval = (claim_after / 2).min(SCAN_INTERVAL_MAX);
    let mut leaseless = Leaseless::default();
    let mut retries = Retries::new(interval);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
        let Some(node) = node.upgrade() else { return };
        if let Err(e) = scan(&node, &objects, &own, claim_after, &mut leaseless, &mut retries).await {
            tracing::warn!(error = %e, "replaying lost journals failed; the next scan tries again");
        }
    }
}

/// The journals a scan found without a lease, and since when (this node's
/// clock): one is claimed only once it stayed without for `claim_after`,
/// as a lease is. Its owner may be alive, its lease gone for an instant (a
/// claimer's retire raced a renewal): it writes one again within
/// `lease_renew`. Bounded by the journals listed (those no longer without
/// a lease are forgotten at each scan).
#[derive(Default)]
struct Leaseless(std::collections::HashMap<String, tokio::time::Instant>);

impl Leaseless {
    /// Whether `journal`, seen without a lease now, has been for `claim_after`.
    fn expired(&mut self, journal: &str, claim_after: Duration) -> bool {
        let since = *self.0.entry(journal.to_string()).or_insert_with(tokio::time::Instant::now);
        since.elapsed() >= claim_after
    }
}

/// The journals whose replay failed in a way that would repeat at once
/// (`ReplayError::Lasting`): how many times in a row, and when each may be
/// tried again. Bounded by the journals listed (those no longer listed are
/// forgotten at each scan).
struct Retries {
    /// The scan interval: the first wait after a failure is twice this.
    interval: Duration,
    failed: std::collections::HashMap<String, (u32, tokio::time::Instant)>,
    /// Journals this node claimed whose replay has not finished: taking the
    /// claim again after a failed replay (the log down) goes on with the
    /// same claim, counted once in `tern_journal_claims_total`. Bounded by
    /// the journals in object storage.
    claimed: std::collections::HashSet<String>,
}

impl Retries {
    fn new(interval: Duration) -> Retries {
        Retries { interval, failed: std::collections::HashMap::new(), claimed: std::collections::HashSet::new() }
    }

    /// Whether `journal` may be tried now.
    fn due(&self, journal: &str) -> bool {
        self.failed.get(journal).is_none_or(|(_, next)| tokio::time::Instant::now() >= *next)
    }

    /// `journal` failed again: its next try waits twice as long (at most `RETRY_DELAY_MAX`).
    fn failed(&mut self, journal: &str) -> Duration {
        let failures = self.failed.get(journal).map_or(0, |(failures, _)| *failures).saturating_add(1);
        let delay = self.interval.saturating_mul(1 << failures.min(16)).min(RETRY_DELAY_MAX);
        self.failed.insert(journal.to_string(), (failures, tokio::time::Instant::now() + delay));
        delay
    }

    fn succeeded(&mut self, journal: &str) {
        self.failed.remove(journal);
    }
}

/// Why a replay failed, and whether trying again at once would fail the same way.
#[derive(Debug)]
pub(crate) enum ReplayError {
    /// It would fail again at the next scan (a lane with a gap, a namespace
    /// gone or made again, entries appended and not seen applied): tried
    /// again at growing intervals (`Retries`), so that its entries are not
    /// appended again at every scan.
    Lasting(String),
    /// The log or object storage failed (an outage passes): tried again at
    /// the next scan.
    Passing(String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Lasting(reason) | ReplayError::Passing(reason) => f.write_str(reason),
        }
    }
}

/// Object storage's errors (`JournalObjects`) pass.
impl From<String> for ReplayError {
    fn from(reason: String) -> ReplayError {
        ReplayError::Passing(reason)
    }
}

/// Claims and replays every journal but `own` whose lease is older than
/// `claim_after`, or that has had none for as long. A journal that fails
/// is logged and the scan goes on: one stuck journal never keeps the
/// others from being claimed. One that would fail the same way again
/// waits (`Retries`); while it waits, whether it has a lease is not looked
/// at, so its time without one starts again when it is due.
async fn scan(
    node: &Node,
    objects: &JournalObjects,
    own: &str,
    claim_after: Duration,
    leaseless: &mut Leaseless,
    retries: &mut Retries,
) -> Result<(), String> {
    let journals = objects.journals().await?;
    leaseless.0.retain(|journal, _| journals.contains(journal));
    retries.failed.retain(|journal, _| journals.contains(journal));
    retries.claimed.retain(|journal| journals.contains(journal));
    for journal in journals.iter().filter(|journal| *journal != own) {
        if !retries.due(journal) {
            leaseless.0.remove(journal);
            continue;
        }
        match scan_one(node, objects, journal, own, claim_after, leaseless, &mut retries.claimed).await {
            Ok(()) => retries.succeeded(journal),
            Err(ReplayError::Passing(e)) => tracing::warn!(journal, error = %e, "replaying a lost journal failed; the next scan tries again"),
            Err(ReplayError::Lasting(e)) => {
                let delay = retries.failed(journal);
                tracing::warn!(journal, error = %e, retry_in_s = delay.as_secs(), "replaying a lost journal failed; tried again later");
            }
        }
    }
    Ok(())
}

/// Claims and replays `journal` if its lease expired (or it has had none for `claim_after`).
async fn scan_one(
    node: &Node,
    objects: &JournalObjects,
    journal: &str,
    own: &str,
    claim_after: Duration,
    leaseless: &mut Leaseless,
    claimed: &mut std::collections::HashSet<String>,
) -> Result<(), ReplayError> {
    let renewed_at_ms = match objects.lease(journal).await? {
        Some(lease) => {
            leaseless.0.remove(journal);
            lease.renewed_at_ms
        }
        None if leaseless.expired(journal, claim_after) => 0,
        None => return Ok(()),
    };
    if now_ms().saturating_sub(renewed_at_ms) < claim_after.as_millis() as u64 {
        return Ok(());
    }
    // A claim older than twice the wait is a claimer that stopped.
    if !objects.claim(journal, own, claim_after * 2).await? {
        return Ok(());
    }
    if claimed.insert(journal.to_string()) {
        crate::metrics::JOURNAL_CLAIMS.inc();
    }
    tracing::info!(journal, renewed_at_ms, "a journal's lease expired: replaying it");
    replay(node, objects, journal, claim_after).await
}

/// Replays one claimed journal: every entry of its objects, each lane (a
/// namespace's partition) in journal order (`plan`), appended
/// (`append_all`), seen applied (`wait_applied`), then its objects deleted
/// and the journal retired (`finish`). If the plan finds the lease renewed
/// within `claim_after`, the owner came back since the scan looked: the
/// claim is withdrawn and the journal left to it.
async fn replay(host: &dyn RipcordHost, objects: &JournalObjects, journal: &str, claim_after: Duration) -> Result<(), ReplayError> {
    let plan = plan(objects, journal).await?;
    if plan.owner_is_back(claim_after) {
        tracing::info!(journal, "a claimed journal's owner renewed its lease meanwhile: left to it");
        return Ok(objects.unclaim(journal).await?);
    }
    let appended = append_all(host, &plan).await?;
    wait_applied(host, &appended).await?;
    finish(objects, journal, &plan).await
}

/// A claimed journal's replay, planned from its objects.
pub(crate) struct Plan {
    /// Its objects, (sequence, path).
    listed: Vec<(u64, ObjectPath)>,
    /// Every entry to append, each lane in journal order up to its first gap.
    ordered: Vec<Entry>,
    /// `ordered`, each placed in its lane (`JournalPlace`).
    placed: Vec<bytes::Bytes>,
    /// Lanes with an offset missing: what follows it is not appended, and
    /// the objects are kept.
    gaps: Vec<String>,
    /// The owner's lease as the plan read it (None: none): a lease
    /// written since is an owner that came back, and `finish` keeps it.
    lease: Option<Lease>,
}

/// Plans the replay of `journal` from its objects.
///
/// Objects hold each lane in journal order within one open of the journal
/// (`journal::objects::LocalEntries`), but a restart puts unreleased
/// entries again and a put that failed may have been stored, so the
/// entries of every object are gathered first, deduplicated by offset and
/// sorted (bounded: an owner's journal holds at most its journal bounds).
/// Each entry carries its place in the journal (`JournalPlace`); a lane's
/// `from` is the lowest offset left in the objects: every entry below it
/// was in an object deleted once all of its entries were applied. Entries
/// below the owner's released marks (its lease, `Lease::released`) are
/// applied and left out: a restart loses the carry of a failed put, and
/// what it held, released meanwhile, is in no object. A lane
/// with a gap (an offset missing between two it holds) is appended up to
/// the gap only and the objects are kept: never an entry after a missing
/// one (it would be ahead of its lane, and lost with the objects).
pub(crate) async fn plan(objects: &JournalObjects, journal: &str) -> Result<Plan, ReplayError> {
    let listed = objects.entries(journal).await?;
    let lease = objects.lease(journal).await?;
    let released: BTreeMap<(String, u32), u64> = match &lease {
        Some(lease) => lease.released.iter().map(|mark| ((mark.ns.clone(), mark.partition), mark.below)).collect(),
        None => BTreeMap::new(),
    };
    let mut lanes: BTreeMap<(String, u32), BTreeMap<u64, Entry>> = BTreeMap::new();
    for (_, path) in &listed {
        // A damaged object stays damaged: lasting.
        for entry in objects.read_object(path).await?.map_err(ReplayError::Lasting)? {
            let lane = (entry.ns.clone(), entry.partition);
            if entry.offset < released.get(&lane).copied().unwrap_or(0) {
                continue;
            }
            lanes.entry(lane).or_default().insert(entry.offset, entry);
        }
    }
    let mut gaps = Vec::new();
    let mut ordered: Vec<Entry> = Vec::new();
    let mut froms: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for ((ns, partition), lane) in lanes {
        let from = *lane.keys().next().expect("a lane holds an entry");
        froms.insert((ns.clone(), partition), from);
        for (expected, (offset, entry)) in (from..).zip(lane) {
            if offset != expected {
                gaps.push(format!("{ns}/{partition} misses journal offset {expected} (holds {offset})"));
                break;
            }
            ordered.push(entry);
        }
    }
    let placed = ordered
        .iter()
        .map(|entry| {
            let from = froms.get(&(entry.ns.clone(), entry.partition)).copied().unwrap_or(entry.offset);
            let place = crate::codec::JournalPlace {
                lane: crate::journal::lane_of(journal, &entry.ns, entry.partitions),
                offset: entry.offset,
                from,
                gap_from: None,
            };
            crate::codec::with_journal_place(&entry.payload, &place)
                .map_err(|e| ReplayError::Lasting(format!("journal {journal}, {}/{} offset {}: {e}", entry.ns, entry.partition, entry.offset)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Plan { listed, ordered, placed, gaps, lease })
}

impl Plan {
    /// Whether the lease the plan read was renewed within `claim_after`
    /// (by the owner's clock; as a scan judges it).
    fn owner_is_back(&self, claim_after: Duration) -> bool {
        self.lease.as_ref().is_some_and(|lease| now_ms().saturating_sub(lease.renewed_at_ms) < claim_after.as_millis() as u64)
    }
}

#[cfg(test)]
impl Plan {
    /// The lanes with an offset missing (what follows is not appended).
    pub(crate) fn gaps(&self) -> &[String] {
        &self.gaps
    }

    /// The entries it would append, in order.
    pub(crate) fn ordered(&self) -> &[Entry] {
        &self.ordered
    }
}

/// Once a replay's entries were seen applied: deletes the journal's
/// objects and retires it, unless a lane had a gap (then they are kept).
/// The objects it listed go even if the owner came back meanwhile (their
/// entries are applied, and they are the oldest: what is left holds each
/// lane with no gap above the lease's marks); the lease goes only if it
/// was not written since the plan (`JournalObjects::retire`).
pub(crate) async fn finish(objects: &JournalObjects, journal: &str, plan: &Plan) -> Result<(), ReplayError> {
    if !plan.gaps.is_empty() {
        return Err(ReplayError::Lasting(format!("journal {journal} has gaps: {}; its objects are kept", plan.gaps.join("; "))));
    }
    for (seq, path) in &plan.listed {
        objects.delete(path).await?;
        tracing::info!(journal, seq, "a lost journal's object is applied; deleted");
    }
    objects.retire(journal, plan.lease.as_ref()).await?;
    tracing::info!(journal, entries = plan.ordered.len(), "a lost journal is replayed and retired");
    Ok(())
}

/// Appends a plan's entries (placed in their journal) to the log in their
/// order; returns, per namespace and partition, the highest log offset
/// appended. Any refusal, or an offset not above the last of its
/// partition, fails the object: it is appended again whole at the next
/// scan, and each entry applies once, in its lane's order.
pub(crate) async fn append_all(host: &dyn RipcordHost, plan: &Plan) -> Result<BTreeMap<(String, u32), u64>, ReplayError> {
    let entries = &plan.ordered;
    let mut tps = Vec::with_capacity(entries.len());
    for entry in entries {
        let partitions = host
            .partitions(&entry.ns)
            .ok_or_else(|| ReplayError::Lasting(format!("namespace {:?} of a journaled write is unknown here", entry.ns)))?;
        if partitions != entry.partitions {
            return Err(ReplayError::Lasting(format!(
                "namespace {:?} has {} partitions, its journaled write was for {}: it was made again; the object is kept",
                entry.ns, partitions, entry.partitions
            )));
        }
        // Looked up again: the namespace may have gone or been made again since.
        let tp = host
            .topic_partition(&entry.ns, entry.partition)
            .ok_or_else(|| ReplayError::Lasting(format!("namespace {:?} has no partition {} here; the object is kept", entry.ns, entry.partition)))?;
        tps.push(tp);
    }
    let log = host.log();
    // Collected first: a stream over a borrowing closure is not `Send` to the compiler.
    let appends: Vec<_> = plan.placed.iter().zip(&tps).map(|(payload, tp)| super::write::append(log, tp, payload.clone())).collect();
    let mut results = futures::stream::iter(appends).buffered(APPENDS_IN_FLIGHT_MAX);
    let mut highest = BTreeMap::new();
    let mut at = 0;
    while let Some(result) = results.next().await {
        let (entry, size_bytes) = (&entries[at], plan.placed[at].len());
        at += 1;
        let log_offset = result.map_err(|e| {
            let reason = format!("the log refused a replayed write: {e}");
            match e {
                // The log refuses this write itself, at every try: over
                // the topic's limit as learned (a write within it was
                // refused with another in one batch: it passes).
                LogError::EntryTooLarge { .. } | LogError::Unsupported(_) => ReplayError::Lasting(reason),
                LogError::TooLargeForTopic { .. } if size_bytes > log.entry_bytes_max_of(&entry.ns) => ReplayError::Lasting(reason),
                _ => ReplayError::Passing(reason),
            }
        })?;
        crate::metrics::JOURNAL_CLAIMED_SEQUENCED.inc();
        if let Some(&top) = highest.get(&(entry.ns.clone(), entry.partition)) {
            if log_offset <= top {
                return Err(ReplayError::Passing(format!("the log put a replayed write at {log_offset}, not after {top}; the object is kept")));
            }
        }
        highest.insert((entry.ns.clone(), entry.partition), log_offset);
    }
    Ok(highest)
}

/// Waits until every partition applied past what was appended to it: here,
/// or on another member (as gossip advertises).
/// Not seen within `APPLIED_WAIT_MAX` is lasting: the entries are in the
/// log, and appending them again at once would not apply them sooner.
async fn wait_applied(host: &dyn RipcordHost, appended: &BTreeMap<(String, u32), u64>) -> Result<(), ReplayError> {
    let deadline = tokio::time::Instant::now() + APPLIED_WAIT_MAX;
    for ((ns, partition), log_offset) in appended {
        loop {
            if host.applied_next(ns, *partition) > *log_offset {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ReplayError::Lasting(format!(
                    "{ns}/{partition} did not apply offset {log_offset} within {APPLIED_WAIT_MAX:?}; the object is kept"
                )));
            }
            tokio::time::sleep(APPLIED_POLL).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::codec::{Mutation, Op, OpKind};
    use crate::journal::objects::{held_offsets, open_j1, FakeLocal, LaneMark, ObjectJournal};
    use object_store::ObjectStore;

    fn entry(offset: u64) -> Entry {
        let op = Op { pk: "k".into(), sk: "".into(), kind: OpKind::Put(Bytes::from(offset.to_string())), condition: None };
        let mutation = Mutation { write_id: Bytes::from(format!("w{offset}")), ops: vec![op], ..Default::default() };
        Entry { ns: "ns".into(), partitions: 1, partition: 0, offset, payload: Bytes::from(crate::codec::encode(&mutation)) }
    }

    /// Found by the simulation (seed 18929 of 100,000): an entry whose put
    /// failed is carried in memory; released, then lost with the carry at
    /// a restart, it is in no object, while an older object not yet deleted
    /// holds the entry before it. The claim saw a gap and kept the journal
    /// for ever (every claim round: "has gaps ... its objects are kept").
    /// The owner's released marks at open, kept in its lease, say what is
    /// applied: a claim leaves that out. Failed before: a gap at offset 1.
    #[tokio::test]
    async fn what_a_restart_lost_below_the_released_marks_is_no_gap() {
        let objects = in_memory();
        let renew = Duration::from_secs(3600);
        let local = tempfile::tempdir().unwrap();
        let first = ObjectJournal::open(
            objects.clone(),
            "j1",
            "n1",
            renew,
            Vec::new(),
            Vec::new(),
            crate::journal::objects::LocalJournal::for_test(local.path()),
        )
        .await
        .unwrap();
        first.append(entry(0)).await.unwrap();
        // Entry 1: its put failed, it was applied and released, and the restart lost the carry.
        drop(first);
        let marks = vec![LaneMark { ns: "ns".into(), partition: 0, below: 2 }];
        let second = ObjectJournal::open(
            objects.clone(),
            "j1",
            "n1",
            renew,
            vec![entry(2)],
            marks,
            crate::journal::objects::LocalJournal::for_test(local.path()),
        )
        .await
        .unwrap();
        second.append(entry(3)).await.unwrap();
        let planned = plan(&objects, "j1").await.unwrap();
        assert_eq!(planned.gaps, Vec::<String>::new());
        assert_eq!(planned.ordered.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![2, 3], "what is released is left out");
        // A lease of an older version has no marks: the gap shows, and the objects are kept.
        objects.renew_lease("j1", "n1", &[], 0).await.unwrap();
        let planned = plan(&objects, "j1").await.unwrap();
        assert_eq!(planned.gaps, vec!["ns/0 misses journal offset 1 (holds 2)".to_string()]);
        assert!(finish(&objects, "j1", &planned).await.is_err());
    }

    /// Review of issue 36 (helper-16): a claimer's finish deleted the
    /// lease of an owner that had come back meanwhile, and with it the
    /// released marks that hide the gaps the owner's deletions leave; a
    /// claim before its next renewal saw a gap (and, the owner lost then,
    /// every claim for ever). The finish keeps a lease renewed since its
    /// plan. Failed before: the lease was gone.
    #[tokio::test]
    async fn a_finish_keeps_the_lease_of_an_owner_that_came_back() {
        let objects = in_memory();
        let local = tempfile::tempdir().unwrap();
        let owner = open_j1(&objects, local.path(), &Arc::new(FakeLocal::default())).await.unwrap();
        owner.append(entry(0)).await.unwrap();
        let planned = plan(&objects, "j1").await.unwrap();
        // The owner renews after the plan (it came back, or never left).
        tokio::time::sleep(Duration::from_millis(5)).await;
        let marks = vec![LaneMark { ns: "ns".into(), partition: 0, below: 1 }];
        objects.renew_lease("j1", "n1", &marks, 0).await.unwrap();
        finish(&objects, "j1", &planned).await.unwrap();
        assert_eq!(objects.entries("j1").await.unwrap(), Vec::new(), "the objects the claim applied go");
        let lease = objects.lease("j1").await.unwrap().expect("the owner's lease stays");
        assert_eq!(lease.released, marks);
        // A lease not renewed since the plan goes with the journal.
        owner.append(entry(1)).await.unwrap();
        let planned = plan(&objects, "j1").await.unwrap();
        drop(owner);
        finish(&objects, "j1", &planned).await.unwrap();
        assert!(objects.lease("j1").await.unwrap().is_none());
    }

    /// Review of issue 36 (L3): a scan judged the lease expired, the owner
    /// renewed it before the claimer's plan read it, and the finish then
    /// deleted the lease the plan had seen (unchanged since): an owner
    /// alive lost its lease and its marks until its next renewal. A plan
    /// that finds the lease renewed within `claim_after` now withdraws the
    /// claim and leaves everything to the owner.
    #[tokio::test]
    async fn a_claim_that_finds_the_lease_renewed_leaves_the_journal_to_its_owner() {
        let objects = in_memory();
        let local = tempfile::tempdir().unwrap();
        let owner = open_j1(&objects, local.path(), &Arc::new(FakeLocal::default())).await.unwrap();
        owner.append(entry(0)).await.unwrap();
        assert!(objects.claim("j1", "n2", Duration::from_secs(120)).await.unwrap());
        // The lease was renewed at open, just now: nothing is appended (the host knows no namespace).
        replay(&NoNamespaces, &objects, "j1", Duration::from_secs(60)).await.expect("left to its owner");
        assert_eq!(objects.entries("j1").await.unwrap().len(), 1, "the objects stay");
        assert!(objects.lease("j1").await.unwrap().is_some(), "the lease stays");
        assert!(objects.claim("j1", "n3", Duration::from_secs(120)).await.unwrap(), "the claim is withdrawn: another node may claim");
        // A lease older than `claim_after` (none is younger than zero) is replayed.
        let replayed = replay(&NoNamespaces, &objects, "j1", Duration::ZERO).await;
        assert!(matches!(replayed, Err(ReplayError::Lasting(ref e)) if e.contains("unknown here")), "{replayed:?}");
        drop(owner);
    }

    /// A node that knows no namespace; asked anything else, the test fails.
    struct NoNamespaces;

    impl RipcordHost for NoNamespaces {
        fn journal(&self) -> &crate::journal::Journal {
            unreachable!("a replay that appends nothing needs no journal")
        }
        fn log(&self) -> &dyn crate::log::Log {
            unreachable!("nothing is appended")
        }
        fn partitions(&self, _: &str) -> Option<u32> {
            None
        }
        fn topic_partition(&self, _: &str, _: u32) -> Option<crate::log::TopicPartition> {
            None
        }
        fn applied_next(&self, _: &str, _: u32) -> u64 {
            unreachable!("nothing was appended to wait for")
        }
        fn log_refused(&self, _: &str, _: u32) {
            unreachable!()
        }
        fn log_took(&self, _: &str, _: u32) {
            unreachable!()
        }
        fn now(&self) -> std::time::Instant {
            unreachable!()
        }
    }

    /// Review of issue 36 (L4): a journal that cannot be replayed (a gap, a
    /// namespace gone) was replayed at every scan, appending its entries
    /// again each time and holding the scan up to `APPLIED_WAIT_MAX`. Its
    /// tries are now spaced: twice the scan interval, doubling, at most
    /// `RETRY_DELAY_MAX`; a success forgets the failures. (A failure of the
    /// log or the store, `ReplayError::Passing`, is not counted: the next
    /// scan tries again.)
    #[tokio::test(start_paused = true)]
    async fn a_journal_that_fails_is_tried_again_at_growing_intervals() {
        let interval = Duration::from_secs(30);
        let mut retries = Retries::new(interval);
        assert!(retries.due("j1"), "never failed: due");
        assert_eq!(retries.failed("j1"), Duration::from_secs(60));
        assert!(!retries.due("j1") && retries.due("j2"), "only the journal that failed waits");
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!retries.due("j1"));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(retries.due("j1"));
        assert_eq!(retries.failed("j1"), Duration::from_secs(120));
        for _ in 0..40 {
            retries.failed("j1");
        }
        assert_eq!(retries.failed("j1"), RETRY_DELAY_MAX, "bounded, and no overflow after many failures");
        retries.succeeded("j1");
        assert!(retries.due("j1"));
        assert_eq!(retries.failed("j1"), Duration::from_secs(60), "a success forgets the failures");
    }

    /// Journal objects in a store of their own, in memory.
    fn in_memory() -> JournalObjects {
        JournalObjects::new(Arc::new(object_store::memory::InMemory::new()), &ObjectPath::from("root"))
    }

    /// An entry whose payload is a mutation (a claim's plan places it in its lane).
    fn write(partition: u32, offset: u64) -> Entry {
        let op = Op { pk: "k".into(), sk: "".into(), kind: OpKind::Put(Bytes::from(offset.to_string())), condition: None };
        let mutation = Mutation { write_id: Bytes::from(format!("w{partition}-{offset}")), ops: vec![op], ..Default::default() };
        Entry { ns: "a".into(), partitions: 4, partition, offset, payload: Bytes::from(crate::codec::encode(&mutation)) }
    }

    /// A claim of the journal, planned now: what it would append (per lane,
    /// its offsets) and the gaps it would stop at.
    async fn claim_now(objects: &JournalObjects) -> (Vec<(u32, u64)>, Vec<String>) {
        let plan = plan(objects, "j1").await.unwrap();
        (plan.ordered().iter().map(|e| (e.partition, e.offset)).collect(), plan.gaps().to_vec())
    }

    /// Review of issue 36: the lease kept the released marks of the open
    /// only, while the owner went on deleting any object all of whose
    /// entries were released (a newer one while an older one held a stuck
    /// entry of another lane) and passing released entries the local
    /// journal no longer had. A claim then saw a lane with a gap below an
    /// object it holds, appended nothing past it, and the acknowledged
    /// writes after it were never applied once the owner was lost. Now a
    /// deletion above an object that stays, and a pass, write the lease
    /// first. Failed before: "a/0 misses journal offset 4 (holds 10)", then
    /// "... offset 2 (holds 10)".
    #[tokio::test]
    async fn a_claim_sees_no_gap_where_the_owner_deleted_or_passed_released_entries() {
        let local_dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let local = Arc::new(FakeLocal::default());
        let open = || open_j1(&objects, local_dir.path(), &local);
        // P = {0/0..3, 1/0}, O = {0/4..9}, Q = {0/10}; lane 0 released below 10, lane 1 not.
        let owner = open().await.unwrap();
        let appends: Vec<_> = (0..4).map(|offset| write(0, offset)).chain([write(1, 0)]).collect();
        futures::future::try_join_all(appends.into_iter().map(|e| owner.append(e))).await.unwrap();
        futures::future::try_join_all((4..10).map(|offset| owner.append(write(0, offset)))).await.unwrap();
        owner.append(write(0, 10)).await.unwrap();
        assert_eq!(held_offsets(&objects).await, vec![vec![0, 1, 2, 3, 0], vec![4, 5, 6, 7, 8, 9], vec![10]]);
        local.released.lock().insert(("a".into(), 0), 10);
        assert_eq!(owner.delete_released().await.unwrap(), 1, "O goes, once the lease says 0/..10 is released; P holds 1/0");
        assert_eq!(claim_now(&objects).await, (vec![(0, 10), (1, 0)], vec![]), "0/0..3 are below the lease's marks");
        local.released.lock().insert(("a".into(), 1), 1);
        assert_eq!(owner.delete_released().await.unwrap(), 1, "P goes; Q holds 0/10");
        assert_eq!(claim_now(&objects).await, (vec![(0, 10)], vec![]));
        drop(owner);
        // Passed: P' = {2/0..1, 3/0}; 2/2..9 released and gone from the local journal; then 2/10.
        for e in objects.entries("j1").await.unwrap() {
            objects.delete(&e.1).await.unwrap();
        }
        let owner = open().await.unwrap();
        let appends = [write(2, 0), write(2, 1), write(3, 0)];
        futures::future::try_join_all(appends.into_iter().map(|e| owner.append(e))).await.unwrap();
        local.released.lock().insert(("a".into(), 2), 10);
        owner.append(write(2, 10)).await.unwrap();
        assert_eq!(held_offsets(&objects).await, vec![vec![0, 1, 0], vec![10]]);
        assert_eq!(claim_now(&objects).await, (vec![(2, 10), (3, 0)], vec![]), "2/0..1 are below the lease's marks");
    }

    /// The lease's marks are written before what they hide is left out:
    /// while the lease cannot be written, no object past passed entries is
    /// put (its entries are carried, the append answered with why).
    #[tokio::test]
    async fn nothing_is_put_past_passed_entries_until_the_lease_says_they_are_released() {
        let (dir, seq_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let local = Arc::new(FakeLocal::default());
        let owner = open_j1(&objects, seq_dir.path(), &local).await.unwrap();
        owner.append(write(0, 0)).await.unwrap();
        // A directory where the lease goes: writing it fails.
        let lease_file = dir.path().join("root/tern/journal/j1/lease.json");
        std::fs::remove_file(&lease_file).unwrap();
        std::fs::create_dir_all(lease_file.join("in-the-way")).unwrap();
        // 1..4 released and gone from the local journal: passed only once the lease says so.
        local.released.lock().insert(("a".into(), 0), 5);
        let refused = owner.append(write(0, 5)).await.unwrap_err();
        assert!(refused.contains("lease"), "{refused}");
        assert_eq!(held_offsets(&objects).await, vec![vec![0]]);
        std::fs::remove_dir_all(&lease_file).unwrap();
        owner.append(write(0, 6)).await.unwrap();
        assert_eq!(held_offsets(&objects).await.concat(), vec![0, 5, 6], "5 carried, then put");
        let marks = objects.lease("j1").await.unwrap().expect("a lease").released;
        assert_eq!(marks, vec![LaneMark { ns: "a".into(), partition: 0, below: 5 }]);
        assert_eq!(claim_now(&objects).await, (vec![(0, 5), (0, 6)], vec![]));
        assert_eq!(owner.delete_released().await.unwrap(), 1);
    }
}
