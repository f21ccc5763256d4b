//! Ripcord in the simulation: nodes that journal writes (answered once the
//! journal has them) and sequence them into the simulated log with the
//! real journal (`journal::Journal`, on disk) and the real sequencer's lane
//! turn (`node::sequencer::lane_round`), through the log's faults: appends
//! that fail before landing, that land and fail (outcome unknown), reads
//! that fail. Nodes stop (losing their lanes' memory of what is in flight)
//! and come back (sequencing again what their journal did not release).
//!
//! In most runs each journal keeps a copy in object storage (the real
//! `JournalObjects` over an in-memory store), and a node may be lost with
//! its data directory: its acknowledged writes then exist only there, and
//! another node claims the lost journal and replays it (the real plan and
//! append of `node::claims`), in two steps with the world going on between
//! them, as a claimer's wait for its entries to apply does. A stopped node's
//! journal may be claimed too, and the node come back and sequence the same
//! entries from its own journal.
//!
//! In runs without that copy, a stopped node's journal sometimes has one
//! entry not yet released damaged on disk (a flipped bit): its next start
//! must be refused, naming exactly that entry's lane offset in the flag
//! that accepts its loss, and the start with that flag (and every start
//! after, without it) goes on past exactly that entry (issue 37).
//!
//! What is checked at the end (`check_journaled`): every acknowledged
//! journaled write was decided exactly once, at its own place in its
//! node's journal lane (so in the order its client wrote it), by the
//! reference model that applies the whole log — one whose entry was lost
//! and accepted at most once; and every journal released everything
//! (nothing stuck, silently, in a lane: not after a lost entry either).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::Rng;

use super::log::SimLog;
use super::world::{count, tp, World, NAMESPACE, SIDE_NAMESPACE, STATS};
use crate::journal::{Journal, JournalLimits, ObjectsConfig};
use crate::log::embedded::AcceptLost;
use crate::log::{Log, TopicPartition};
use crate::node::ripcord_host::RipcordHost;
use crate::node::sequencer::{lane_round, Lane};

/// Nodes that journal writes in each run.
pub(super) const NODES: usize = 2;

/// Journal bounds roomy enough that a run never fills one (a full journal
/// refuses, which the journal's own tests cover).
const LIMITS: JournalLimits = JournalLimits { entries_max: 10_000, bytes_max: 64 * 1024 * 1024, age_max: Duration::from_secs(86_400) };

/// Sequencer turns per node to drain every journal once faults heal, with
/// the clock moving past the longest retry wait between turns.
pub(super) const DRAIN_ROUNDS_MAX: usize = 200;
/// How long a write behind a node's journaled writes waits for them, in
/// rounds of sequencing and applying (a node waits up to its timeout).
const WAIT_RELEASED_ROUNDS_MAX: usize = 3;
/// How far the clock moves per round of that wait: past the sequencer's
/// longest retry wait (2 s), so three rounds are about a write's default
/// timeout (5 s).
const WAIT_RELEASED_CLOCK_STEP_MS: u64 = 2_000;

/// How often a client goes away while its write is being journaled.
const CLIENT_GOES_AWAY_RATE: f64 = 0.05;

/// How often a journaled write has a partner journaled in another lane
/// (`SIDE_NAMESPACE`), so that objects hold two lanes …
const SIDE_WRITE_RATE: f64 = 0.3;
/// … and how often, per sequencer turn, that lane's entries are all
/// released (its partition applied them): objects holding both lanes stay
/// while older ones of one lane are deleted (review of issue 36: a claim
/// then saw a gap below the lease's marks).
const SIDE_RELEASE_RATE: f64 = 0.2;

/// How often, per sequencer turn, a node writes its released marks (the
/// sequencer: every `RELEASE_INTERVAL`) …
const PERSIST_RATE: f64 = 0.2;
/// … and how often a stopped node is killed, its marks released since
/// the last write not written.
const KILLED_RATE: f64 = 0.5;

/// How often a node stopped in a run without journal objects has one of
/// its journal's pending entries damaged on disk.
const JOURNAL_DAMAGE_RATE: f64 = 0.2;

/// How far the clock moves per drain round: past the sequencer's longest
/// retry wait (2 s) and its release interval.
const DRAIN_CLOCK_STEP_MS: u64 = 2_500;

/// One node's ripcord: its journal (None while it is down) and its lane.
pub(super) struct SimNode {
    pub(super) dir: PathBuf,
    pub(super) n: usize,
    /// Which data directory: a lost node comes back with a new one.
    pub(super) generation: u32,
    pub(super) journal: Option<Journal>,
    /// The sequencer's lane of the one partition, while the node runs.
    pub(super) lane: Option<Lane>,
    /// The partition's log refused this node's last write (ripcord journals
    /// its plain writes at once); set by the write path and the sequencer.
    pub(super) refusing: AtomicBool,
    /// A lost journal entry its next start must name and then accept
    /// (`--accept-journal-loss`), and its lane's end then; later starts are
    /// not told again.
    pub(super) to_accept: Option<(AcceptLost, u64)>,
    /// Offsets of its lane lost and accepted before (in this data
    /// directory): damage next to them is named with them, in one range.
    pub(super) accepted_offsets: std::collections::BTreeSet<u64>,
}

impl SimNode {
    /// A node's data directory, with a journal id of its own fixed by the
    /// seed's run (a journal id is random in a real node; here the log's
    /// bytes must replay exactly).
    pub(super) fn new(dir: PathBuf, n: usize) -> SimNode {
        let node = SimNode {
            dir,
            n,
            generation: 0,
            journal: None,
            lane: None,
            refusing: AtomicBool::new(false),
            to_accept: None,
            accepted_offsets: Default::default(),
        };
        node.make_dir();
        node
    }

    fn journal_id(&self) -> String {
        // 32 hex digits, as a real journal's id (a journal takes no other).
        format!("{:016x}{:016x}", self.n, self.generation)
    }

    fn make_dir(&self) {
        std::fs::create_dir_all(&self.dir).expect("a node dir");
        std::fs::write(self.dir.join(crate::journal::ID_FILE), self.journal_id()).expect("a journal id");
    }
}

/// A claim of a lost journal between its append and its finish.
pub(super) struct Claim {
    journal: String,
    plan: crate::node::claims::Plan,
    /// The highest log offset appended (the one partition's).
    highest: u64,
}

/// A node as the sequencer's lane sees it.
struct SimHost<'a> {
    journal: &'a Journal,
    /// The node's refusing flag (None: a claimer's, which moves no flag).
    refusing: Option<&'a AtomicBool>,
    log: &'a SimLog,
    /// What gossip says the replicas applied.
    applied_next: u64,
    now: Instant,
}

impl RipcordHost for SimHost<'_> {
    fn journal(&self) -> &Journal {
        self.journal
    }

    fn log(&self) -> &dyn Log {
        self.log
    }

    fn partitions(&self, ns: &str) -> Option<u32> {
        (ns == NAMESPACE || ns == SIDE_NAMESPACE).then_some(1)
    }

    fn topic_partition(&self, ns: &str, partition: u32) -> Option<TopicPartition> {
        match ns {
            SIDE_NAMESPACE => (partition == 0).then(|| TopicPartition { topic: std::sync::Arc::from(SIDE_NAMESPACE), partition }),
            _ => (partition == 0).then(tp),
        }
    }

    fn applied_next(&self, _ns: &str, _partition: u32) -> u64 {
        self.applied_next
    }

    fn log_refused(&self, _ns: &str, _partition: u32) {
        if let Some(refusing) = self.refusing {
            refusing.store(true, Ordering::Relaxed);
        }
    }

    fn log_took(&self, _ns: &str, _partition: u32) {
        if let Some(refusing) = self.refusing {
            refusing.store(false, Ordering::Relaxed);
        }
    }

    fn now(&self) -> Instant {
        self.now
    }
}

/// A write answered through a node: in which session of the node (its
/// journal's id: a node lost with its data directory starts another), and
/// where it is decided.
#[derive(Debug, Clone)]
pub(super) struct Answered {
    pub session: String,
    pub at: Place,
}

/// Where an answered write is decided: at its own log offset (answered by
/// the log), or at its place in its journal lane.
#[derive(Debug, Clone)]
pub(super) enum Place {
    Log(u64),
    Lane(Bytes, u64),
}

/// An acknowledged journaled write: where its journal put it.
#[derive(Debug, Clone)]
pub(super) struct Journaled {
    pub lane: Bytes,
    pub offset: u64,
    pub write_id: Bytes,
}

impl World {
    /// The world's clock as an instant (the sequencer's waits).
    fn now(&self) -> Instant {
        self.clock_base + Duration::from_millis(self.clock_ms)
    }

    /// Starts node `n` if it is down: its journal opens, with what it did not release.
    pub(super) async fn start_node(&mut self, n: usize) -> Result<(), String> {
        if self.nodes[n].journal.is_some() {
            return Ok(());
        }
        // The lease is never renewed in a run: the simulation decides when a journal is claimed.
        let objects =
            self.journal_objects.clone().map(|objects| ObjectsConfig { objects, node: format!("node{n}"), lease_renew: Duration::from_secs(86_400) });
        // An open whose lease put fails retries on a real-time timer: spared.
        let journal_id = self.nodes[n].journal_id();
        if let Some(switch) = &self.objects_switch {
            switch.spare_lease(Some(&journal_id));
        }
        let accepted = match self.nodes[n].to_accept.take() {
            Some((lost, lane_end)) => {
                let refused = match Journal::open(&self.nodes[n].dir, LIMITS, None).await {
                    Ok(_) => return Err(format!("node {n}'s journal opened without a word of its lost entry {lost}")),
                    Err(e) => e.to_string(),
                };
                // Every range the refusal names, as an operator gives them: the
                // lost entry's exactly, and any other lane's whose next entry
                // the damaged frame could have been (its header is not
                // trusted to name its lane: docs/damage.md).
                let named: Vec<AcceptLost> = refused
                    .split("--accept-journal-loss ")
                    .skip(1)
                    .filter_map(|flag| AcceptLost::parse_flag("--accept-journal-loss", flag.split([' ', ':']).next()?).ok())
                    .collect();
                // Of its own lane, exactly the lost entry, with those lost and
                // accepted before next to it (their damaged bytes run
                // together), and, when no later entry of the lane shows where
                // the damage ends, offsets past the lane's end (entries the
                // damaged bytes could have held, as far as the journal knows).
                let ours: Vec<u64> = named.iter().filter(|range| range.topic == NAMESPACE).flat_map(|range| range.from..range.to).collect();
                let node = &mut self.nodes[n];
                let exact = ours.contains(&lost.from) && ours.iter().all(|o| *o == lost.from || node.accepted_offsets.contains(o) || *o >= lane_end);
                if !exact {
                    return Err(format!(
                        "node {n}'s journal lost entry {lost} (and before it {:?}), yet its refusal names offsets {ours:?} of its lane: {refused}",
                        node.accepted_offsets
                    ));
                }
                // Every offset of the ranges accepted: later damage next to
                // them is named with them.
                node.accepted_offsets.extend(ours);
                named
            }
            None => Vec::new(),
        };
        let journal = Journal::open_accepting(&self.nodes[n].dir, LIMITS, objects, accepted).await;
        if let Some(switch) = &self.objects_switch {
            switch.spare_lease(None);
        }
        let journal = journal.map_err(|e| format!("node {n}'s journal did not open: {e}"))?;
        self.nodes[n].journal = Some(journal);
        Ok(())
    }

    /// Stops node `n`: its journal closes, its lane's memory is gone.
    pub(super) async fn stop_node(&mut self, n: usize) {
        count(&STATS.node_restarts);
        if let Some(journal) = self.nodes[n].journal.take() {
            let lane = journal.lane(NAMESPACE);
            // Sometimes killed: the marks released since they were last
            // written are not, and its restart replays those entries.
            match self.dice.side.random_bool(KILLED_RATE) {
                true => journal.close_unpersisted().await,
                false => journal.close().await,
            }
            // What the next start finds not released (the marks as written).
            let pending = journal.pending_of(NAMESPACE, 0).await.ok().flatten();
            drop(journal);
            if let (Some(pending), Some(lane)) = (pending, lane) {
                if self.journal_objects.is_none() && self.dice.journal_damage.random_bool(JOURNAL_DAMAGE_RATE) {
                    self.damage_a_pending_entry(n, pending.start..pending.end, lane);
                }
            }
        }
        self.nodes[n].lane = None;
        self.nodes[n].refusing.store(false, Ordering::Relaxed);
    }

    /// Flips a bit in one entry of `NAMESPACE` in `offsets` (not released)
    /// of stopped node `n`'s journal, and notes its loss to be accepted at
    /// the node's next start: in its payload (its header still names the
    /// offset lost) or in its header's offset (no frame names it: a later
    /// frame of the lane shows the jump, or none does and the lane's end is
    /// in doubt). The newest segment's last frame too: a whole frame that
    /// fails its checksum there is named, not cut as a torn write.
    fn damage_a_pending_entry(&mut self, n: usize, offsets: std::ops::Range<u64>, lane: Bytes) {
        use crate::log::embedded::frame::{decode_header, HEADER_BYTES};
        if self.nodes[n].to_accept.is_some() {
            return;
        }
        let wal = self.nodes[n].dir.join("wal");
        let mut segments: Vec<PathBuf> =
            std::fs::read_dir(&wal).map(|dir| dir.filter_map(|e| e.ok()).map(|e| e.path()).collect()).unwrap_or_default();
        segments.sort();
        // (segment, byte, offset) of every frame of the namespace's lane in `offsets`.
        let mut candidates = Vec::new();
        for path in &segments {
            let bytes = std::fs::read(path).expect("a journal segment");
            let mut at = 0;
            while at + HEADER_BYTES <= bytes.len() {
                let Some(header) = decode_header(bytes[at..at + HEADER_BYTES].try_into().expect("a header's bytes")) else { break };
                let end = at + HEADER_BYTES + header.payload_len as usize;
                if end > bytes.len() {
                    break;
                }
                let payload = Bytes::copy_from_slice(&bytes[at + HEADER_BYTES..end]);
                let ours = crate::codec::decode(payload, 0, 1).is_ok_and(|m| m.ops.iter().all(|op| op.pk != "side"));
                if ours && offsets.contains(&header.offset) {
                    candidates.push((path.clone(), at, header.offset));
                }
                at = end;
            }
        }
        if candidates.is_empty() {
            return;
        }
        let (path, at, offset) = candidates.swap_remove(self.dice.journal_damage.random_range(0..candidates.len()));
        let mut bytes = std::fs::read(&path).expect("a journal segment");
        // The payload's second byte, or the top byte of the header's offset.
        let byte = if self.dice.journal_damage.random_bool(0.5) { HEADER_BYTES + 1 } else { HEADER_BYTES - 1 };
        bytes[at + byte] ^= 0x10;
        std::fs::write(&path, &bytes).expect("a journal segment");
        count(&STATS.journal_entries_lost);
        self.lost_places.insert((lane, offset));
        let lost = AcceptLost { topic: NAMESPACE.to_string(), partition: 0, from: offset, to: offset + 1 };
        self.nodes[n].to_accept = Some((lost, offsets.end));
    }

    /// A client writes through node `n`, which routes it as its write path
    /// does (`node::ripcord_route`): a plain write (no condition) rides
    /// ripcord, to the log first and to the journal when the log surely did
    /// not take it, or at once while the partition's log refuses writes or
    /// this node's journal holds writes of it not yet applied; a write that
    /// asks to be journaled goes to the journal; a conditional write goes to
    /// the log only. A node makes a write id for every journaled write; one
    /// in three here has none, so that the lane's own rule (each place
    /// once), not the write-id window, keeps a repeated entry from applying
    /// twice. Each answered write is noted in its node's session, in order.
    pub(super) async fn client_write(&mut self, n: usize) -> Result<(), String> {
        use crate::node::ripcord_route;
        self.start_node(n).await?;
        let mut mutation = self.new_mutation();
        match self.dice.journal_ids.random_bool(1.0 / 3.0) {
            true => mutation.write_id = Bytes::new(),
            false if mutation.write_id.is_empty() => {
                self.next_write_id += 1;
                mutation.write_id = Bytes::from(format!("w{}", self.next_write_id));
            }
            false => {}
        }
        let asks_journaled = self.dice.routes.random_bool(0.3);
        let rides_ripcord = !asks_journaled && mutation.ops.iter().all(|op| op.condition.is_none());
        let time_ms = self.writer_clock_ms();
        let session = self.nodes[n].journal_id();
        let refusing = self.nodes[n].refusing.load(Ordering::Relaxed);
        if asks_journaled || ripcord_route::journal_first(rides_ripcord, refusing, self.holds_pending(n)) {
            match self.journal_one(n, &mutation, time_ms, &session).await {
                // Answered, or its client went away.
                Ok(_) => return Ok(()),
                Err(()) if asks_journaled || !ripcord_route::try_log_after_journal_refused(self.holds_pending(n)) => return Ok(()),
                Err(()) => {}
            }
        }
        let pending_end = self.nodes[n].journal.as_ref().and_then(|journal| journal.pending_end(NAMESPACE, 0));
        if let Some(end) = ripcord_route::journal_to_wait_for(true, false, pending_end) {
            if !self.wait_released(n, end).await? {
                // The node's wait ran out: answered `BehindJournal`, nothing written.
                count(&STATS.behind_journal);
                return Ok(());
            }
        }
        let payload = Bytes::from(crate::codec::encode_at(&mutation, time_ms));
        match self.log.append(&tp(), payload).await {
            Ok(offset) => {
                self.nodes[n].refusing.store(false, Ordering::Relaxed);
                count(&STATS.writes_acknowledged);
                for op in &mutation.ops {
                    self.versions.insert(op.pk.clone(), offset);
                }
                self.answered.push(Answered { session, at: Place::Log(offset) });
            }
            Err(e) => {
                if ripcord_route::refuses_every_write(&e) {
                    self.nodes[n].refusing.store(true, Ordering::Relaxed);
                }
                if ripcord_route::journal_after_log_error(rides_ripcord, &e) {
                    let _ = self.journal_one(n, &mutation, time_ms, &session).await;
                }
            }
        }
        Ok(())
    }

    /// A write waits for node `n`'s journaled writes of the partition below
    /// `end` to be applied, as `Journal::wait_released` does: here for at
    /// most `WAIT_RELEASED_ROUNDS_MAX` sequencer turns and apply steps of
    /// every replica, the clock moving as a node's would while it waits
    /// (past a lane's retry wait). Whether they were.
    async fn wait_released(&mut self, n: usize, end: u64) -> Result<bool, String> {
        for _ in 0..WAIT_RELEASED_ROUNDS_MAX {
            if self.released_to(n, end).await {
                return Ok(true);
            }
            self.clock_ms += WAIT_RELEASED_CLOCK_STEP_MS;
            self.log.set_stamp_clock(self.dice.stamps.then_some(self.clock_ms));
            self.sequence(n).await?;
            for r in 0..super::world::REPLICAS {
                self.apply_step(r).await?;
            }
            // Releases what was seen applied.
            self.sequence(n).await?;
        }
        Ok(self.released_to(n, end).await)
    }

    /// Whether node `n`'s journal released every entry of the partition below `end` (asked, not waited for).
    async fn released_to(&self, n: usize, end: u64) -> bool {
        let journal = self.nodes[n].journal.as_ref().expect("started");
        journal.wait_released(NAMESPACE, 0, end, tokio::time::Instant::now()).await
    }

    /// Whether node `n`'s journal holds writes of the partition not yet released.
    fn holds_pending(&self, n: usize) -> bool {
        self.nodes[n].journal.as_ref().is_some_and(|journal| journal.holds_pending(NAMESPACE, 0))
    }

    /// Journals `mutation` in node `n`'s journal; Ok(true) once it is
    /// answered, Ok(false) when its client went away. Err: not answered:
    /// refused before the journal took it (full, too old), or journaled
    /// but not copied to object storage (sequenced all the same: applied
    /// at most once).
    ///
    /// Sometimes the client goes away once the local journal has the
    /// entry, before its copy goes to object storage (not answered;
    /// sequenced all the same, and put into object storage before the next
    /// entry of its lane that is).
    async fn journal_one(&mut self, n: usize, mutation: &crate::codec::Mutation, time_ms: u64, session: &str) -> Result<bool, ()> {
        let goes_away = self.dice.cancels.random_bool(CLIENT_GOES_AWAY_RATE);
        let journal = self.nodes[n].journal.as_ref().expect("started");
        if goes_away {
            count(&STATS.journal_appends_dropped);
            journal.append_at_then_go_away(NAMESPACE, 1, 0, mutation, time_ms).await;
            return Ok(false);
        }
        let offset = journal.append_at(NAMESPACE, 1, 0, mutation, time_ms).await.map_err(|_| ())?;
        count(&STATS.journaled);
        let lane = journal.lane(NAMESPACE).expect("a lane once written");
        self.journaled.push(Journaled { lane: lane.clone(), offset, write_id: mutation.write_id.clone() });
        self.answered.push(Answered { session: session.to_string(), at: Place::Lane(lane, offset) });
        if self.dice.side.random_bool(SIDE_WRITE_RATE) {
            self.journal_side(n, time_ms).await;
        }
        Ok(true)
    }

    /// Journals a write of `SIDE_NAMESPACE` in node `n`'s journal (its
    /// outcome is not checked: no replica applies that lane).
    async fn journal_side(&mut self, n: usize, time_ms: u64) {
        let journal = self.nodes[n].journal.as_ref().expect("started");
        let op = crate::codec::Op { pk: "side".into(), sk: "".into(), kind: crate::codec::OpKind::Delete, condition: None };
        let mutation = crate::codec::Mutation { ops: vec![op], ..Default::default() };
        if journal.append_at(SIDE_NAMESPACE, 1, 0, &mutation, time_ms).await.is_ok() {
            count(&STATS.side_journaled);
        }
    }

    /// Sometimes `SIDE_NAMESPACE`'s partition applied node `n`'s entries of it: released.
    fn release_side(&mut self, n: usize) {
        let journal = self.nodes[n].journal.as_ref().expect("started");
        if let Some(end) = journal.pending_end(SIDE_NAMESPACE, 0) {
            if self.dice.side.random_bool(SIDE_RELEASE_RATE) {
                journal.release_below(SIDE_NAMESPACE, 0, end);
            }
        }
    }

    /// One sequencer turn of node `n`'s lane, with what gossip says the
    /// replicas applied (the most any replica applied; sometimes a stale
    /// word: the least).
    pub(super) async fn sequence(&mut self, n: usize) -> Result<(), String> {
        self.start_node(n).await?;
        self.release_side(n);
        let journal = self.nodes[n].journal.as_ref().expect("started above");
        if let Ok(Some(pending)) = journal.pending_of(NAMESPACE, 0).await {
            let applied = self.replicas.iter().map(|r| r.handle.applied_next());
            let applied_next = match self.dice.gossip.random_bool(0.8) {
                true => applied.max().unwrap_or(0),
                false => applied.min().unwrap_or(0),
            };
            let now = self.now();
            let node = &mut self.nodes[n];
            let journal = node.journal.as_ref().expect("checked above");
            let lane = node.lane.get_or_insert_with(|| Lane::starting_at(pending.start));
            let host = SimHost { journal, refusing: Some(&node.refusing), log: self.log.as_ref(), applied_next, now };
            // A refused turn (the journal's read) is tried again at the next.
            let _ = lane_round(&host, pending, &tp(), lane).await;
        }
        // As the sequencer does now and then: the released marks go to disk
        // (a mark not written is tried again at a later turn), and objects
        // all of whose entries were released go. A node stopped between a
        // release and its mark's write replays those entries.
        let journal = self.nodes[n].journal.as_ref().expect("started above");
        if self.dice.side.random_bool(PERSIST_RATE) {
            let _ = journal.persist_released().await;
        }
        let _ = journal.delete_released_objects().await;
        Ok(())
    }

    /// Node `n` is lost with its data directory (its journal lives on in
    /// object storage only) and comes back, later, with a new one.
    pub(super) async fn lose_node(&mut self, n: usize) {
        if self.journal_objects.is_none() {
            // Without a copy, losing the directory loses acknowledged writes by design.
            return self.stop_node(n).await;
        }
        self.stop_node(n).await;
        count(&STATS.nodes_lost);
        let node = &mut self.nodes[n];
        let _ = std::fs::remove_dir_all(&node.dir);
        node.generation += 1;
        node.accepted_offsets.clear();
        node.make_dir();
    }

    /// One step of a claim: a claimer (a running node) plans a lost
    /// journal's replay (or a stopped node's: its lease would expire) and
    /// appends it; at a later step, once the replicas applied past what it
    /// appended, deletes its objects and retires it.
    pub(super) async fn claim_step(&mut self) -> Result<(), String> {
        let Some(objects) = self.journal_objects.clone() else { return Ok(()) };
        if let Some(claim) = self.claim.take() {
            let applied = self.replicas.iter().map(|r| r.handle.applied_next()).max().unwrap_or(0);
            if applied <= claim.highest {
                // Not yet applied: the claimer waits (or, sometimes, stops: the objects stay).
                if self.dice.claims.random_bool(0.8) {
                    self.claim = Some(claim);
                }
                return Ok(());
            }
            // Objects written after the plan stay (and the journal is found again by the next scan).
            if crate::node::claims::finish(&objects, &claim.journal, &claim.plan).await.is_ok() {
                count(&STATS.claims);
            }
            return Ok(());
        }
        let candidates = self.claimable().await;
        if candidates.is_empty() {
            return Ok(());
        }
        let journal = candidates[self.dice.claims.random_range(0..candidates.len())].clone();
        let Some(claimer) = self.nodes.iter().position(|node| node.journal.is_some()) else { return Ok(()) };
        let Ok(plan) = crate::node::claims::plan(&objects, &journal).await else { return Ok(()) };
        let claimer_journal = self.nodes[claimer].journal.as_ref().expect("running");
        let host = SimHost { journal: claimer_journal, refusing: None, log: self.log.as_ref(), applied_next: 0, now: self.now() };
        if let Ok(highest) = crate::node::claims::append_all(&host, &plan).await {
            let highest = highest.get(&(NAMESPACE.to_string(), 0)).copied().unwrap_or(0);
            self.claim = Some(Claim { journal, plan, highest });
        }
        Ok(())
    }

    /// The journals a scan would claim: every journal with objects but the
    /// ones running nodes write (a stopped node's lease would expire; a
    /// lost node's journal is no node's any more).
    async fn claimable(&self) -> Vec<String> {
        let Some(objects) = &self.journal_objects else { return Vec::new() };
        let running: Vec<String> = self.nodes.iter().filter(|node| node.journal.is_some()).map(|node| node.journal_id()).collect();
        let mut claimable = Vec::new();
        for journal in objects.journals().await.unwrap_or_default() {
            if !running.contains(&journal) && objects.entries(&journal).await.is_ok_and(|entries| !entries.is_empty()) {
                claimable.push(journal);
            }
        }
        claimable
    }

    /// After every step: every journal's objects hold each lane with no
    /// offset missing above the lease's released marks, so that a claim at
    /// any moment appends every entry they hold (a claim stops at a gap:
    /// the acknowledged writes after it were never applied once their node
    /// was lost; found in review of issue 36: an append cancelled by its
    /// client, or two appends reordered on their way to the uploader).
    pub(super) async fn check_journal_objects(&self) -> Result<(), String> {
        let Some(objects) = &self.journal_objects else { return Ok(()) };
        for journal in objects.journals().await? {
            let plan = crate::node::claims::plan(objects, &journal).await.map_err(|e| e.to_string())?;
            if !plan.gaps().is_empty() {
                return Err(format!("journal {journal}'s objects miss an entry of a lane: {}", plan.gaps().join("; ")));
            }
        }
        Ok(())
    }

    /// After the faults heal: every node runs, and its lane turns until its
    /// journal released everything (replicas applying meanwhile); a journal
    /// still holding entries then is stuck.
    pub(super) async fn drain_journals(&mut self) -> Result<(), String> {
        for n in 0..NODES {
            self.start_node(n).await?;
        }
        let mut last_pending = Vec::new();
        for _ in 0..DRAIN_ROUNDS_MAX {
            let mut pending = Vec::new();
            // Every lost journal is claimed and replayed (its objects deleted once applied).
            let lost = self.claimable().await;
            if !lost.is_empty() || self.claim.is_some() {
                pending.push(format!("lost journals {lost:?}"));
                self.claim_step().await?;
            }
            for n in 0..NODES {
                let journal = self.nodes[n].journal.as_ref().expect("started above");
                if let Some(p) = journal.pending_of(NAMESPACE, 0).await.map_err(|e| e.to_string())? {
                    pending.push(format!("node {n}: journal offsets {}..{}", p.start, p.end));
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            last_pending = pending;
            self.clock_ms += DRAIN_CLOCK_STEP_MS;
            self.log.set_stamp_clock(self.dice.stamps.then_some(self.clock_ms));
            for n in 0..NODES {
                self.sequence(n).await?;
            }
            self.catch_up().await?;
        }
        Err(format!("journals stuck with entries never released after {DRAIN_ROUNDS_MAX} rounds: {}", last_pending.join("; ")))
    }

    /// Every write answered through a node — plain, conditional, journaled
    /// — was decided after the ones answered before it through the same node
    /// in the same session (`decided`: the log offset each lane place was
    /// decided at): a client's writes through one node apply in the order it
    /// saw them answered. (It found a conditional write that went to the
    /// log while the node's journal held an earlier journaled write of the
    /// partition, decided before it: seed 3; `waits_for_journal`.)
    pub(super) fn check_order(&self, decided: &std::collections::BTreeMap<(Bytes, u64), (Bytes, u64)>) -> Result<(), String> {
        let mut last: std::collections::HashMap<&str, (u64, &Answered)> = std::collections::HashMap::new();
        for answered in &self.answered {
            let at = match &answered.at {
                Place::Log(offset) => *offset,
                Place::Lane(lane, offset) => match decided.get(&(lane.clone(), *offset)) {
                    Some((_, at)) => *at,
                    None if self.lost_places.contains(&(lane.clone(), *offset)) => continue,
                    None => return Err(format!("an answered journaled write ({answered:?}) was never decided")),
                },
            };
            if let Some((before, earlier)) = last.get(answered.session.as_str()) {
                if at <= *before {
                    return Err(format!(
                        "node session {}: {answered:?} was answered after {earlier:?} yet decided at log offset {at}, not after {before}",
                        answered.session
                    ));
                }
            }
            last.insert(&answered.session, (at, answered));
        }
        Ok(())
    }

    /// Every acknowledged journaled write was decided exactly once, at its
    /// own place in its lane (`decided`: what the model decided at each
    /// lane place, by write id; a write without one is known by its place).
    pub(super) fn check_journaled(&self, decided: &std::collections::BTreeMap<(Bytes, u64), (Bytes, u64)>) -> Result<(), String> {
        for write in &self.journaled {
            let place = (write.lane.clone(), write.offset);
            match decided.get(&place).map(|(id, _)| id) {
                Some(id) if *id == write.write_id || write.write_id.is_empty() => {}
                // Lost and accepted: applied before the loss, or never.
                None if self.lost_places.contains(&place) => {}
                Some(id) => {
                    return Err(format!(
                        "journal lane {:?} offset {} held acknowledged write {:?}, yet {:?} was decided there",
                        write.lane, write.offset, write.write_id, id
                    ))
                }
                None => {
                    return Err(format!(
                        "acknowledged journaled write {:?} (lane {:?} offset {}) was never applied",
                        write.write_id, write.lane, write.offset
                    ))
                }
            }
        }
        Ok(())
    }
}
