//! The write path: the one way anything is written to the log.
//!
//! Every writer — a client's records and batches, Firebase's REST and
//! realtime writes, its rules and onDisconnect registrations, the API
//! keys, the namespace options, procedure deployments, ticks and outbox
//! trims — builds a `WriteRequest` and calls `Node::write`; the journal's
//! sequencer and the replay of lost journals append the entries it
//! journaled through `append` below. Nothing else appends to the log
//! (`tests/it/layers.rs` checks it). So the policies every write must
//! keep are decided here, once, in this order:
//!
//! 1. **who may write what** (`reserved.rs`): a client's writes never
//!    touch Tern's own keys, and each of Tern's writers touches only its own;
//! 2. **the log's size limit** (`Log::entry_bytes_max_of`: the log's, or
//!    less where the namespace's Kafka topic takes less): an entry the log
//!    cannot take is refused before anything is made durable — a journaled
//!    write the log can never take would hold up its partition's lane;
//! 3. **durability**: `Sequenced` (answered once the log has it) or
//!    `Journaled` (answered once this node's journal has it; the sequencer
//!    appends it to the log soon after, `sequencer.rs`). A client's write
//!    that does not say gets its namespace's `write_mode`; a write that
//!    waits for its outcome, and every write of Tern's own, is sequenced;
//! 4. **where**: a caller that needs the outcome (a condition,
//!    `Wait::Applied`, a write id: a retry learns the original's version)
//!    needs a node that applies the partition; on any other node the
//!    answer is `Receipt::Forward` and nothing is written;
//! 5. **ripcord** (`ripcord` setting): a client's plain write (no
//!    condition, no wait) that the log refuses — or would, while it refuses
//!    every write — is journaled instead, answered as a journaled write.
//!    Only a refusal is: a write whose outcome the log left unknown (in
//!    flight when it failed: `LogError::Ambiguous`) may be in the log, and
//!    a journaled copy would apply it a second time, after writes
//!    acknowledged since; it is answered 503 `outcome_unknown`. While a
//!    partition holds journaled writes of this node not yet applied, its
//!    plain writes are journaled too, and a client's write that goes to the
//!    log (a condition, a wait, `durability=sequenced`) waits until they
//!    are applied — at most its timeout, then 503 `behind_journal`, nothing
//!    written — so no client's write passes one answered before it.
//!
//! The answer is a typed `Receipt` or a `WriteError`, never an HTTP
//! response: each protocol renders it in its own words.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::reserved::{self, Reserved, Touches, Writer};
use super::ripcord_route;
use super::{Namespace, Node};
use crate::codec::{self, Mutation};
use crate::log::{Log, LogError, TopicPartition};
use crate::metrics;
use crate::partition::outcome::Outcome;
use crate::partition::PartitionStatus;
use crate::position::Position;

/// How a write is made durable before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// In the log (embedded: fsynced; Kafka: acknowledged by every in-sync
    /// replica): answered with its version.
    Sequenced,
    /// In this node's journal: answered with its write id; the sequencer
    /// appends it to the log, in journal order, and it applies once.
    Journaled,
}

/// What the writer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Durability only (`Durability`). A write whose outcome the caller
    /// needs anyway (a condition, a write id) still waits for that, at
    /// most the request's `timeout`.
    Durable,
    /// Until this node applied the write, at most the request's `timeout`:
    /// the outcome is known, and a read here sees the write.
    Applied,
}

/// What is written.
#[derive(Debug, Clone)]
pub enum Entry {
    /// Operations on records of one partition: a put, a batch, a tree
    /// write, a deployment. Applied all or nothing.
    Mutation(Mutation),
    /// A procedure tick: no operations, only the writer's time, so due
    /// timers fire in log time when nothing is written.
    Tick,
    /// A tick at time 0 (it moves no log time) that trims the partition's
    /// outbox below input offset `below` on every replica.
    OutboxTrim { below: u64 },
}

/// One write, as every writer asks for it.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    pub writer: Writer,
    pub partition: u32,
    pub entry: Entry,
    /// None: the default (see the module doc, 3).
    pub durability: Option<Durability>,
    pub wait: Wait,
    /// The longest a write that waits for its outcome (`Wait::Applied`, a
    /// condition, a write id) waits for this node to apply it. Apart from
    /// `wait` because a condition needs its outcome without being asked to
    /// wait (and still rides ripcord and `write_mode` as a plain write).
    /// It bounds the whole write: the wait behind this node's journaled
    /// writes included (module doc, 5).
    pub timeout: Duration,
    /// Sent here by another node, which kept its client's order (it waited
    /// behind its own journaled writes) before it forwarded the write: this
    /// node's journaled writes, answered to other clients, do not order it.
    pub forwarded: bool,
}

impl WriteRequest {
    /// `entry` of `writer` into `partition`, durable, with the default
    /// durability and the default bound on waiting for an outcome.
    pub fn new(writer: Writer, partition: u32, entry: Entry) -> WriteRequest {
        let timeout = Duration::from_millis(crate::limits::WAIT_MS_DEFAULT);
        WriteRequest { writer, partition, entry, durability: None, wait: Wait::Durable, timeout, forwarded: false }
    }

    /// The same, answered once applied here, waiting at most `timeout`.
    pub fn applied_within(mut self, timeout: Duration) -> WriteRequest {
        self.wait = Wait::Applied;
        self.timeout = timeout;
        self
    }
}

/// What became of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    /// In the log at offset `version`: the version of every record it
    /// wrote; its position is `ns:partition:version+1`. `duplicate`: a
    /// retry of a write already applied (same write id): `version` is the
    /// original's.
    Sequenced { version: u64, duplicate: bool },
    /// Durable in this node's journal under `write_id` (the request's, or
    /// one made for it), not yet in the log. `ripcord`: journaled because
    /// the log refused it.
    Journaled { write_id: Bytes, ripcord: bool },
    /// The caller needs the outcome and this node does not apply the
    /// partition: nothing was written; send the write to a holder, with at
    /// most `timeout` (what the request's timeout left after this node's
    /// wait behind its journaled writes).
    Forward { timeout: Duration },
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the log did not accept the write: {0}")]
    Log(LogError),
    #[error("{0}")]
    Reserved(Reserved),
    #[error("the journal did not take the write: {0}")]
    Journal(crate::journal::JournalError),
    /// In this node's journal (it will be sequenced and applied) but not in
    /// object storage, as configured: not acknowledged as durable, and not
    /// to be sent again either (it would apply twice): its write id says
    /// where to ask for its outcome (issue 36, defect 7).
    #[error(
        "the write is in this node's journal as {} and will be applied, but object storage did not take it ({reason}); \
         do not send it again: ask GET /v1/writes/{} for its outcome",
        String::from_utf8_lossy(write_id),
        String::from_utf8_lossy(write_id)
    )]
    JournaledNotCopied { write_id: Bytes, reason: String },
    #[error("a journaled write cannot wait to be applied: it is answered before it is sequenced; ask for a sequenced write to wait")]
    JournaledCannotWait,
    /// The partition holds journaled writes of this node answered before
    /// this one, and they were not applied within its timeout: nothing was
    /// written (it would have passed them).
    #[error(
        "partition {partition} holds journaled writes answered before this one, not yet applied within {timeout_ms} ms \
         (the log is down or slow); this write may not pass them and was not written: retry it"
    )]
    BehindJournal { partition: u32, timeout_ms: u64 },
    #[error("partition {partition} is not served by this node: {reason}")]
    Refused { partition: u32, reason: String },
    /// This node let the partition go before the write was appended: nothing
    /// was written; the caller may send it to a holder.
    #[error("partition {partition} is no longer held by this node")]
    NotHeld { partition: u32 },
    /// The namespace was deleted while the write was on its way: nothing was written.
    #[error("namespace {ns:?} was deleted; nothing was written")]
    NamespaceDeleted { ns: String },
    #[error("condition failed on op {op_index}")]
    ConditionFailed { op_index: usize, current_version: Option<u64>, position: Position },
    #[error("the write is durable at version {version} but was not applied here within {timeout_ms} ms")]
    NotApplied { version: u64, timeout_ms: u64, position: Position },
    #[error("the write at version {version} was rejected when applied: {reason}")]
    Rejected { version: u64, reason: String },
    #[error("the write at version {version} was applied but its outcome is no longer remembered")]
    OutcomeUnknown { version: u64 },
    /// Its write id (`Idempotency-Key`) was applied at `of` for another payload.
    #[error(
        "this Idempotency-Key was used at version {of} for a different write; nothing was applied: a retry sends the same \
         write with the same key, a new write takes a new key"
    )]
    KeyReused { of: u64 },
}

impl Entry {
    /// The bytes the log holds (the mutation stamped with the writer's time).
    fn encode(&self) -> Vec<u8> {
        match self {
            Entry::Mutation(mutation) => codec::encode(mutation),
            Entry::Tick => codec::encode_tick(codec::now_ms()),
            Entry::OutboxTrim { below } => codec::encode_trim(0, *below),
        }
    }

    fn touches(&self) -> Touches<'_> {
        match self {
            Entry::Mutation(mutation) => Touches::Mutation(mutation),
            Entry::Tick | Entry::OutboxTrim { .. } => Touches::ProceduresTick,
        }
    }

    fn has_condition(&self) -> bool {
        matches!(self, Entry::Mutation(m) if m.ops.iter().any(|op| op.condition.is_some()))
    }

    fn has_write_id(&self) -> bool {
        matches!(self, Entry::Mutation(m) if !m.write_id.is_empty())
    }
}

/// Whether the caller must learn what applying the entry decided: a
/// condition, `Wait::Applied`, or a write id (a retry learns the
/// original's version). Only a node that applies the partition can tell.
fn needs_outcome(entry: &Entry, wait: Wait) -> bool {
    wait == Wait::Applied || entry.has_write_id() || entry.has_condition()
}

impl Node {
    /// Writes `request` into `namespace` (see the module doc).
    pub async fn write(&self, namespace: &Namespace, request: WriteRequest) -> Result<Receipt, WriteError> {
        let WriteRequest { writer, partition, mut entry, durability, wait, timeout, forwarded } = request;
        // Held by a request from before its deletion: it must not be
        // journaled (dropped later) nor land in a namespace created again.
        if namespace.is_deleted() {
            return Err(WriteError::NamespaceDeleted { ns: namespace.name.to_string() });
        }
        // A client's records keep as many versions as the namespace says,
        // told in the entry, so every replica keeps alike (`store::history`).
        // Options this node only guesses (a holder unreachable, the options
        // partition catching up) leave the records' history as it is: a
        // guessed 0 would erase it on every replica.
        let (options, known) = match writer {
            Writer::Client => {
                let (options, known) = self.namespace_options_known(namespace).await;
                (Some(options), known)
            }
            _ => (None, false),
        };
        if let (Some(options), true, Entry::Mutation(mutation)) = (options, known, &mut entry) {
            // A stored value out of bounds (a foreign writer) keeps the most:
            // an entry stating more would be refused by every replica.
            mutation.history_max = Some(options.history_max.min(crate::limits::HISTORY_MAX_MAX));
        }
        // One bound for the whole write, the wait behind the journal included.
        let deadline = tokio::time::Instant::now() + timeout;
        reserved::check(writer, &namespace.name, entry.touches()).map_err(WriteError::Reserved)?;
        assert!(partition < namespace.partitions, "a write names a partition of its namespace");
        debug_assert!(
            !matches!(&entry, Entry::Mutation(m) if m.ops.iter().any(|op| !matches!(op.kind, codec::OpKind::Procedure(_)) && namespace.partition_of(&op.pk) != partition)),
            "every op of a mutation is in its partition"
        );
        let payload = Bytes::from(entry.encode());
        let payload_bytes = payload.len();
        let max_bytes = self.log.entry_bytes_max_of(&namespace.name);
        if payload_bytes > max_bytes {
            return Err(WriteError::Log(LogError::EntryTooLarge { size_bytes: payload_bytes, max_bytes }));
        }
        match self.durability_of(options, writer, &entry, durability, wait)? {
            Durability::Journaled => return self.journal(namespace, partition, entry, payload_bytes, false).await,
            Durability::Sequenced => {}
        }
        // A write that asked to be sequenced (`durability=sequenced`) wants
        // the log's answer: ripcord journals only writes that did not say.
        let rides_ripcord =
            self.config.ripcord && writer == Writer::Client && wait == Wait::Durable && !entry.has_condition() && durability.is_none();
        // Per partition (issue 36, defect 3): journaled at once while this
        // partition's log refuses writes, and while it has journaled writes
        // not yet applied, so a client's plain writes apply in the order it
        // saw them; another partition's outage changes nothing here.
        let (ns, holds_pending) = (&namespace.name, |node: &Node| node.journal.holds_pending(&namespace.name, partition));
        if ripcord_route::journal_first(rides_ripcord, self.log_refuses(ns, partition), holds_pending(self)) {
            match self.journal(namespace, partition, entry.clone(), payload_bytes, true).await {
                // The journal refused it before journaling it (full, too
                // old, its object storage not ready) and nothing of the
                // partition waits in it: the log is tried, which orders
                // nothing wrongly and clears the flag if it takes it
                // (issue 36, review F11: a flagged partition with plain
                // writes only answered 503 for as long as the journal
                // refused, the log healthy or not).
                Err(WriteError::Journal(e)) if ripcord_route::try_log_after_journal_refused(holds_pending(self)) => {
                    tracing::debug!(ns = %namespace.name, partition, error = %e, "ripcord's journal refused a write; trying the log");
                }
                answered => return answered,
            }
        }
        // Nor may a client's write that goes to the log pass them: it waits
        // until they are applied, at most its timeout (found by the
        // simulation, seed 3: a conditional write answered after a journaled
        // one was decided before it).
        // It waits for those pending when it came (`pending_end`), not for
        // the ones journaled meanwhile, which were answered after it.
        let pending_end = self.journal.pending_end(ns, partition);
        if let Some(end) = ripcord_route::journal_to_wait_for(writer == Writer::Client, forwarded, pending_end) {
            if !self.journal.wait_released(ns, partition, end, deadline).await {
                return Err(WriteError::BehindJournal { partition, timeout_ms: timeout.as_millis() as u64 });
            }
        }
        let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
        // Only a client's writes (and the sequencer's appends) move the
        // ripcord flag: Tern's own writes (ticks, trims, Firebase, keys) go
        // to partitions of their own choosing, and one refused there must
        // not journal every client's write on the node (nor one taken there
        // end ripcord for the partitions still refusing).
        let moves_flag = writer == Writer::Client;
        match self.sequence(namespace, partition, &entry, payload, wait, timeout).await {
            Ok(receipt) => {
                if moves_flag && matches!(receipt, Receipt::Sequenced { .. }) {
                    self.log_took(&namespace.name, partition);
                }
                Ok(receipt)
            }
            Err(WriteError::Log(e)) if ripcord_route::refuses_every_write(&e) => {
                if moves_flag {
                    self.log_refused(&namespace.name, partition);
                }
                // Only a write the log surely did not take is journaled: a
                // copy of one that may have landed would apply it twice,
                // the copy after writes acknowledged since (issue 36).
                match ripcord_route::journal_after_log_error(rides_ripcord, &e) {
                    true => self.journal(namespace, partition, entry, payload_bytes, true).await,
                    false => Err(WriteError::Log(e)),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// A write of Tern's own that must be in the log when answered (a
    /// deployment's version, a key, a setting): its version, or an error —
    /// `NotHeld` when it waits for its outcome and this node does not apply
    /// the partition.
    pub async fn write_sequenced(&self, namespace: &Namespace, mut request: WriteRequest) -> Result<u64, WriteError> {
        assert_ne!(request.writer, Writer::Client, "a client's write is answered by its receipt");
        request.durability = Some(Durability::Sequenced);
        let partition = request.partition;
        match self.write(namespace, request).await? {
            Receipt::Sequenced { version, .. } => Ok(version),
            Receipt::Forward { .. } => Err(WriteError::NotHeld { partition }),
            Receipt::Journaled { .. } => unreachable!("a sequenced write of Tern's own never rides ripcord"),
        }
    }

    /// The durability a write gets (see the module doc, 3).
    fn durability_of(
        &self,
        options: Option<super::namespace_options::NamespaceOptions>,
        writer: Writer,
        entry: &Entry,
        asked: Option<Durability>,
        wait: Wait,
    ) -> Result<Durability, WriteError> {
        let waits = wait == Wait::Applied;
        match asked {
            Some(Durability::Journaled) if waits => Err(WriteError::JournaledCannotWait),
            Some(Durability::Journaled) if !matches!(entry, Entry::Mutation(_)) => {
                unreachable!("ticks and trims are sequenced: the journal holds mutations")
            }
            Some(durability) => Ok(durability),
            None if writer != Writer::Client || waits => Ok(Durability::Sequenced),
            None => Ok(options.expect("a client write has its namespace's options").write_mode.durability()),
        }
    }

    /// Appends `payload` and, when the caller needs it, waits for this
    /// node to apply it and reports what the apply loop decided.
    async fn sequence(
        &self,
        namespace: &Namespace,
        partition: u32,
        entry: &Entry,
        payload: Bytes,
        wait: Wait,
        timeout: Duration,
    ) -> Result<Receipt, WriteError> {
        let handle = namespace.handle(partition);
        if let PartitionStatus::Refused(reason) = handle.status() {
            return Err(WriteError::Refused { partition, reason });
        }
        let needs_outcome = needs_outcome(entry, wait);
        // A writer that waits for its outcome here keeps the partition here until it has it.
        let _pin = match needs_outcome {
            true => match handle.pin() {
                Some(pin) => Some(pin),
                None => return Ok(Receipt::Forward { timeout }),
            },
            false => None,
        };
        let version = append(self.log.as_ref(), &handle.tp, payload).await.map_err(WriteError::Log)?;
        let position = || Position::single(&namespace.name, partition, version + 1);
        if !needs_outcome {
            return Ok(Receipt::Sequenced { version, duplicate: false });
        }
        if !handle.wait_applied(version + 1, timeout).await {
            return Err(WriteError::NotApplied { version, timeout_ms: timeout.as_millis() as u64, position: position() });
        }
        match handle.outcome(version) {
            Some(Outcome::Applied) => Ok(Receipt::Sequenced { version, duplicate: false }),
            Some(Outcome::ConditionFailed { op_index, current_version }) => {
                Err(WriteError::ConditionFailed { op_index, current_version, position: position() })
            }
            Some(Outcome::Duplicate { of, original }) => match *original {
                Outcome::ConditionFailed { op_index, current_version } => {
                    Err(WriteError::ConditionFailed { op_index, current_version, position: position() })
                }
                _ => Ok(Receipt::Sequenced { version: of, duplicate: true }),
            },
            Some(Outcome::KeyReused { of }) => Err(WriteError::KeyReused { of }),
            // Only the sequencer's appends carry a journal place, and nobody waits on them.
            Some(Outcome::JournalRepeated { .. } | Outcome::JournalAhead { .. }) => Err(WriteError::OutcomeUnknown { version }),
            Some(Outcome::Skipped(reason)) => Err(WriteError::Rejected { version, reason: reason.to_string() }),
            None => Err(WriteError::OutcomeUnknown { version }),
        }
    }

    /// Makes the mutation durable in this node's journal (with a write id
    /// made for it if it has none, so a journal sequenced twice applies it
    /// once) and wakes the sequencer. Conditions are decided when it is applied.
    async fn journal(&self, namespace: &Namespace, partition: u32, entry: Entry, payload_bytes: usize, ripcord: bool) -> Result<Receipt, WriteError> {
        let Entry::Mutation(mut mutation) = entry else { unreachable!("only mutations are journaled") };
        if mutation.write_id.is_empty() {
            mutation.write_id = Bytes::from(format!("j{:032x}", rand::random::<u128>()));
            // The id grows the entry the sequencer appends (a protobuf bytes
            // field: a tag byte, a one-byte length, the bytes): still within
            // the log's limit?
            debug_assert!(mutation.write_id.len() < 128, "its length is one varint byte");
            let size_bytes = payload_bytes + 2 + mutation.write_id.len();
            let max_bytes = self.log.entry_bytes_max_of(&namespace.name);
            if size_bytes > max_bytes {
                return Err(WriteError::Log(LogError::EntryTooLarge { size_bytes, max_bytes }));
            }
        }
        debug_assert!(mutation.write_id.len() <= crate::limits::WRITE_ID_BYTES_MAX);
        match self.journal.append(&namespace.name, namespace.partitions, partition, &mutation).await {
            Ok(_) => {}
            Err(crate::journal::JournalError::Objects(reason)) => {
                self.writes.sequencer_wake.notify_one();
                return Err(WriteError::JournaledNotCopied { write_id: mutation.write_id, reason });
            }
            // The journal's own log may have the write (its fsync failed or
            // stalled): its outcome is unknown, and it is told by write id.
            Err(crate::journal::JournalError::Log(LogError::Ambiguous(reason))) => {
                let id = String::from_utf8_lossy(&mutation.write_id).into_owned();
                return Err(WriteError::Log(LogError::Ambiguous(format!(
                    "the journal may hold the write as {id} ({reason}); ask GET /v1/writes/{id} before sending it again"
                ))));
            }
            Err(e) => return Err(WriteError::Journal(e)),
        }
        self.writes.sequencer_wake.notify_one();
        Ok(Receipt::Journaled { write_id: mutation.write_id, ripcord })
    }
}

/// A journaled write not applied after this long means the log is not
/// taking the journal's writes (they apply within milliseconds when it is).
const JOURNALING_AGE_MIN: Duration = Duration::from_secs(1);

/// The write path's own state on the node.
#[derive(Default)]
pub(super) struct WritePathState {
    /// Wakes the sequencer after a journaled write.
    pub(super) sequencer_wake: Arc<tokio::sync::Notify>,
    /// The partitions whose log refused a client's write and has taken none
    /// since (a client's sequenced write or the sequencer's append): while
    /// one is here, ripcord journals its plain writes at once instead of
    /// waiting for the log first. At most one entry per partition of the
    /// node's namespaces; `refusing_count` lets a write skip the lock while
    /// none refuses.
    refusing: parking_lot::Mutex<std::collections::HashSet<(Arc<str>, u32)>>,
    refusing_count: std::sync::atomic::AtomicUsize,
}

impl Node {
    /// The log refused a write to `ns`/`partition`: ripcord now journals
    /// that partition's plain writes at once.
    pub fn log_refused(&self, ns: &str, partition: u32) {
        let mut refusing = self.writes.refusing.lock();
        if refusing.insert((Arc::from(ns), partition)) {
            self.writes.refusing_count.store(refusing.len(), std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(ns, partition, "the log refuses writes; ripcord journals this partition's plain writes until it takes them again");
        }
    }

    /// The log took a write to `ns`/`partition` (a load, and a lock only when it had refused one).
    pub fn log_took(&self, ns: &str, partition: u32) {
        if self.writes.refusing_count.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return;
        }
        let mut refusing = self.writes.refusing.lock();
        if refusing.remove(&(Arc::from(ns), partition)) {
            self.writes.refusing_count.store(refusing.len(), std::sync::atomic::Ordering::Relaxed);
            tracing::info!(ns, partition, "the log takes writes again");
        }
    }

    /// Whether the log refused a write to `ns`/`partition` and has taken none since.
    fn log_refuses(&self, ns: &str, partition: u32) -> bool {
        self.writes.refusing_count.load(std::sync::atomic::Ordering::Relaxed) > 0 && self.writes.refusing.lock().contains(&(Arc::from(ns), partition))
    }

    /// Whether ripcord is on and journals writes the log does not take now:
    /// some partition's log refused a write, or the journal's oldest write
    /// has waited `JOURNALING_AGE_MIN` (a partition with journaled writes
    /// pending journals its plain writes without asking the log first).
    pub fn ripcord_engaged(&self) -> bool {
        self.config.ripcord
            && (self.writes.refusing_count.load(std::sync::atomic::Ordering::Relaxed) > 0
                || self.journal.oldest_age().is_some_and(|age| age >= JOURNALING_AGE_MIN))
    }
}

/// Appends one encoded entry to `tp`: the only call of `Log::append` above
/// the log (the journal's sequencer and the replay of lost journals append
/// what `Node::write` journaled through it).
pub(super) async fn append(log: &dyn Log, tp: &TopicPartition, payload: Bytes) -> Result<u64, LogError> {
    let started = Instant::now();
    let offset = log.append(tp, payload).await?;
    metrics::LOG_APPEND_SECONDS.observe(started.elapsed().as_secs_f64());
    Ok(offset)
}
