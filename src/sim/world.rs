//! The simulated world: a seeded replica set over one faulty log, its
//! random steps (writes, applies, faults, snapshots, crashes, moves) and the
//! checks at the end.

use super::journals::{Answered, Claim, Journaled, SimNode, NODES};
use super::log::{Faults, SimLog};
use super::menu::{Action, Dice};
use super::model;
use crate::apply::open::{try_open, Step};
use crate::apply::{PartitionProcedures, Recovery};
use crate::codec::{Condition, Mutation, Op, OpKind};
use crate::log::{Log, LogError, LogReader, TopicPartition};
use crate::partition::{PartitionHandle, PartitionStatus};
use crate::snapshot::Snapshots;
use crate::store::hash::StateHash;
use crate::store::PartitionStore;
use bytes::Bytes;
use rand::Rng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The one namespace and partition every replica holds.
pub(super) const NAMESPACE: &str = "sim";

/// Another namespace, journaled beside `NAMESPACE` so that a journal's
/// objects hold two lanes (`sim/journals.rs`): its writes land in a log of
/// their own that no replica applies, and they are released when a seed's
/// dice say the other partition applied them.
pub(super) const SIDE_NAMESPACE: &str = "side";

/// The log's identity; `OTHER_LOG` is a cluster sharing the snapshot bucket.
pub(crate) const LOG_IDENTITY: &str = "sim:log";

pub(super) const OTHER_LOG: &str = "sim:other-log";

/// Replicas of the one partition in each run.
pub(super) const REPLICAS: usize = 3;

/// Random steps per run (writes, applies, faults, snapshots).
pub(super) const STEPS: usize = 160;

/// Rounds (one apply step per replica each) to reach the log's end after
/// healing; a replica still behind then is stuck.
pub(super) const QUIESCE_ROUNDS_MAX: usize = 200;

/// Keys are drawn from a small space, so writes collide and conditions
/// matter; some are what the procedures act on (`in/` is counted by the
/// counter, `set` and `move` arm the timers' timers).
pub(super) const KEYS: [&str; 8] = ["k0", "k1", "k2", "k3", "in/0", "in/1", "set", "move"];

/// The one record a procedure writes (the counter's count): checked by the
/// state hashes, not by the model, which knows nothing of procedures.
pub(super) const PROCEDURE_KEYS: [&str; 1] = ["count"];

/// The world's clock at the start (ms), and the most it moves per step.
pub(super) const CLOCK_START_MS: u64 = 1_000;
pub(super) const CLOCK_STEP_MS_MAX: u64 = 400;

/// How far a writer whose clock was stepped forward is ahead.
pub(super) const CLOCK_AHEAD_MS: u64 = 86_400_000;

/// The test guests (`examples/procedures/build/`, checked against a fresh
/// build by scripts/test.sh): the counter (reads, writes, private state,
/// outputs; traps on "boom"), the timers.
const COUNTER: &[u8] = include_bytes!("../../examples/procedures/build/counter.wasm");
const TIMERS: &[u8] = include_bytes!("../../examples/procedures/build/timers.wasm");

/// Fuel a seed's counter may be deployed with: near what a call needs
/// (some calls run out, which must be alike on every replica), and plenty.
const COUNTER_FUEL: [u64; 4] = [20_000, 40_000, 80_000, 10_000_000];

/// Most entries one apply step reads.
pub(super) const BATCH_MAX: usize = 8;

/// What the runs did, summed over seeds (printed, so a run shows it
/// exercised what it claims to).
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub writes_acknowledged: AtomicU64,
    pub writes_failed: AtomicU64,
    pub retries: AtomicU64,
    pub crashes: AtomicU64,
    pub wipes: AtomicU64,
    pub snapshots: AtomicU64,
    pub restores: AtomicU64,
    pub overtaken_readers: AtomicU64,
    pub deployments: AtomicU64,
    pub ticks: AtomicU64,
    pub reloads: AtomicU64,
    pub journaled: AtomicU64,
    pub journal_appends_dropped: AtomicU64,
    pub side_journaled: AtomicU64,
    pub node_restarts: AtomicU64,
    pub lane_ahead: AtomicU64,
    pub lane_repeated: AtomicU64,
    pub nodes_lost: AtomicU64,
    pub claims: AtomicU64,
    pub behind_journal: AtomicU64,
    pub objects_refused: AtomicU64,
    pub objects_answers_lost: AtomicU64,
    pub journal_entries_lost: AtomicU64,
}

pub(super) static STATS: Stats = Stats {
    writes_acknowledged: AtomicU64::new(0),
    writes_failed: AtomicU64::new(0),
    retries: AtomicU64::new(0),
    crashes: AtomicU64::new(0),
    wipes: AtomicU64::new(0),
    snapshots: AtomicU64::new(0),
    restores: AtomicU64::new(0),
    overtaken_readers: AtomicU64::new(0),
    deployments: AtomicU64::new(0),
    ticks: AtomicU64::new(0),
    reloads: AtomicU64::new(0),
    journaled: AtomicU64::new(0),
    journal_appends_dropped: AtomicU64::new(0),
    side_journaled: AtomicU64::new(0),
    node_restarts: AtomicU64::new(0),
    lane_ahead: AtomicU64::new(0),
    lane_repeated: AtomicU64::new(0),
    nodes_lost: AtomicU64::new(0),
    claims: AtomicU64::new(0),
    behind_journal: AtomicU64::new(0),
    objects_refused: AtomicU64::new(0),
    objects_answers_lost: AtomicU64::new(0),
    journal_entries_lost: AtomicU64::new(0),
};

pub(super) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write!(
            f,
            "writes acknowledged {}, failed {} (retried with their write id {}), crashes {}, wipes {}, snapshots {}, \
             restores {}, readers overtaken by retention {}, deployments {}, ticks {}, procedure reloads {}, \
             journaled writes acknowledged {}, journal appends dropped by their client {}, entries journaled in another lane {}, node restarts {}, journaled entries ahead of their lane {}, repeated {}, \
             nodes lost with their journal {}, journals claimed and retired {}, writes that waited out a journal {}, \
             object puts and deletes refused {} (of which done all the same {}), journal entries damaged and their loss accepted {}",
            n(&self.writes_acknowledged),
            n(&self.writes_failed),
            n(&self.retries),
            n(&self.crashes),
            n(&self.wipes),
            n(&self.snapshots),
            n(&self.restores),
            n(&self.overtaken_readers),
            n(&self.deployments),
            n(&self.ticks),
            n(&self.reloads),
            n(&self.journaled),
            n(&self.journal_appends_dropped),
            n(&self.side_journaled),
            n(&self.node_restarts),
            n(&self.lane_ahead),
            n(&self.lane_repeated),
            n(&self.nodes_lost),
            n(&self.claims),
            n(&self.behind_journal),
            n(&self.objects_refused),
            n(&self.objects_answers_lost),
            n(&self.journal_entries_lost)
        )
    }
}

/// What one run found wrong, with the seed that reproduces it.
#[derive(Debug)]
pub(super) struct Failure {
    pub seed: u64,
    pub step: usize,
    pub what: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "simulation seed {} (fault rates: {}) failed at step {}: {}\n  replay: TERN_SIM_SEED={} cargo test --release --lib sim::tests::replay -- --nocapture",
            self.seed,
            Dice::new(self.seed).fault_rates_text(),
            self.step,
            self.what,
            self.seed
        )
    }
}

/// One replica: a handle over a store, and where its apply loop stands.
pub(super) struct Replica {
    pub(super) dir: PathBuf,
    /// Which incarnation of the store file (a crash starts the next).
    pub(super) generation: u32,
    pub(super) handle: Arc<PartitionHandle>,
    /// Its procedures as its apply loop holds them: loaded from the store
    /// at the first batch, kept across batches, loaded again after a crash
    /// or a reload, at whatever offset that happens.
    pub(super) procedures: PartitionProcedures,
    pub(super) reader: Option<Box<dyn LogReader>>,
    /// Held (applying) or let go.
    pub(super) held: bool,
    pub(super) refused: Option<String>,
}

impl Replica {
    pub(super) fn store_path(dir: &Path, generation: u32) -> PathBuf {
        dir.join(format!("store-{generation}.redb"))
    }

    pub(super) fn durable_path(dir: &Path) -> PathBuf {
        dir.join("durable.redb")
    }

    /// Opens the store at its path (as a node does at start).
    pub(super) fn open(dir: PathBuf, generation: u32) -> Replica {
        let store = PartitionStore::open(&Replica::store_path(&dir, generation), 1, 1 << 20).expect("a sim store opens");
        let applied_next = store.read().and_then(|r| r.applied_next()).expect("a sim store reads");
        let ring = crate::fanout::RingLimits::TEST;
        let handle = Arc::new(PartitionHandle::new(Arc::from(NAMESPACE), 0, 1, Arc::new(store), applied_next, ring));
        let procedures = crate::apply::partition_procedures(&handle);
        Replica { dir, generation, handle, procedures, reader: None, held: true, refused: None }
    }

    pub(super) fn status_serving(&self) -> bool {
        self.held && self.refused.is_none() && self.reader.is_some()
    }
}

/// One run's world.
pub(super) struct World {
    /// Every random choice, each from its named stream.
    pub(super) dice: Dice,
    pub(super) log: Arc<SimLog>,
    pub(super) snapshots: Snapshots,
    pub(super) recovery: Recovery,
    pub(super) replicas: Vec<Replica>,
    /// The state hash seen at each applied offset, by any replica.
    pub(super) hashes: BTreeMap<u64, StateHash>,
    /// Writes whose append failed, to retry with their write id.
    pub(super) retries: Vec<Mutation>,
    /// What writers know: the last acknowledged version of each key.
    pub(super) versions: BTreeMap<String, u64>,
    pub(super) next_write_id: u64,
    /// The world's clock (ms): what a writer's clock says when it is right,
    /// and the log's stamp when the log stamps.
    pub(super) clock_ms: u64,
    /// The faults in force for this step.
    pub(super) faults: Faults,
    /// The instant the world's clock reads 0 at.
    pub(super) clock_base: std::time::Instant,
    /// Nodes that journal writes (ripcord), each with its journal and lane.
    pub(super) nodes: Vec<SimNode>,
    /// Every acknowledged journaled write.
    pub(super) journaled: Vec<Journaled>,
    /// Every write answered through a node, in the order answered.
    pub(super) answered: Vec<Answered>,
    /// Journal lane places whose entries were damaged on disk and whose
    /// loss was accepted (`--accept-journal-loss`): decided at most once.
    pub(super) lost_places: std::collections::HashSet<(Bytes, u64)>,
    /// Where journals keep their copy (None: this run's journals keep none).
    pub(super) journal_objects: Option<crate::journal::objects::JournalObjects>,
    /// The switch of their store's outages (`Fault::ObjectsFail`).
    pub(super) objects_switch: Option<Arc<super::objects::FlakyObjects>>,
    /// A claim between its append and its finish.
    pub(super) claim: Option<Claim>,
    pub(super) step: usize,
    pub(super) root: tempfile::TempDir,
}

/// Runs one seed; `Err` says what broke and how to replay it.
pub(super) fn run_seed(seed: u64) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let mut world = World::new(seed);
    let result = runtime.block_on(world.run());
    result.map_err(|what| Failure { seed, step: world.step, what })
}

impl World {
    pub(super) fn new(seed: u64) -> World {
        let root = tempfile::Builder::new().prefix("tern-sim").tempdir_in(sim_tmp()).expect("a temp dir");
        let snapshots = Snapshots::open("memory://").expect("memory snapshots");
        let recovery =
            Recovery { snapshots: Some(snapshots.clone()), into_new_log: false, store_cache_bytes: 1 << 20, damaged_dir: None, accept_lost: None };
        let replicas = (0..REPLICAS)
            .map(|i| {
                let dir = root.path().join(format!("r{i}"));
                std::fs::create_dir_all(&dir).expect("a replica dir");
                Replica::open(dir, 0)
            })
            .collect();
        let dice = Dice::new(seed);
        let flaky_rate = dice.flaky_append_rate;
        let (journal_objects, objects_switch) = journal_objects(&dice).unzip();
        World {
            dice,
            log: Arc::new(SimLog::new(LOG_IDENTITY, super::streams::stream(seed, "fault/flaky_append/strikes"), flaky_rate)),
            snapshots,
            recovery,
            replicas,
            hashes: BTreeMap::new(),
            retries: Vec::new(),
            versions: BTreeMap::new(),
            next_write_id: 0,
            clock_ms: CLOCK_START_MS,
            faults: Faults::default(),
            clock_base: std::time::Instant::now(),
            nodes: (0..NODES).map(|n| SimNode::new(root.path().join(format!("node{n}")), n)).collect(),
            journaled: Vec::new(),
            answered: Vec::new(),
            lost_places: std::collections::HashSet::new(),
            journal_objects,
            objects_switch,
            claim: None,
            step: 0,
            root,
        }
    }

    pub(super) async fn run(&mut self) -> Result<(), String> {
        // The log is not empty from the start: an empty log beside only
        // another log's snapshots is the signature of a lost log, refused
        // by design (README, "Recovering from snapshots").
        self.marker();
        self.plant_another_logs_snapshot().await?;
        for step in 0..STEPS {
            self.step = step;
            let faults = self.dice.faults();
            self.log.set_faults(faults);
            if let Some(switch) = &self.objects_switch {
                switch.set_failing(faults.objects_fail);
            }
            self.faults = faults;
            self.clock_ms += self.dice.clock.random_range(0..=CLOCK_STEP_MS_MAX);
            self.log.set_stamp_clock(self.dice.stamps.then_some(self.clock_ms));
            match self.dice.action() {
                Action::Write => self.write().await,
                Action::Deploy => self.deploy().await,
                Action::Tick => self.tick().await,
                Action::ClientWrite => {
                    let n = self.dice.nodes.random_range(0..NODES);
                    self.client_write(n).await?;
                }
                Action::Sequence => {
                    let n = self.dice.nodes.random_range(0..NODES);
                    self.sequence(n).await?;
                }
                Action::NodeLost => {
                    let n = self.dice.nodes.random_range(0..NODES);
                    self.lose_node(n).await;
                }
                Action::Claim => self.claim_step().await?,
                Action::NodeRestart => {
                    let n = self.dice.nodes.random_range(0..NODES);
                    // Down until its next write or sequencer turn starts it again.
                    self.stop_node(n).await;
                }
                Action::Reload => {
                    let r = self.replica();
                    count(&STATS.reloads);
                    self.replicas[r].procedures = crate::apply::partition_procedures(&self.replicas[r].handle);
                }
                Action::Apply => {
                    let r = self.replica();
                    self.apply_step(r).await?;
                }
                Action::Marker => self.marker(),
                Action::Snapshot => self.snapshot().await?,
                Action::Retention => self.retention(),
                Action::Crash => {
                    let r = self.replica();
                    self.crash(r, false);
                }
                Action::Wipe => {
                    let r = self.replica();
                    self.crash(r, true);
                }
                Action::LetGo => {
                    let r = self.replica();
                    self.let_go(r);
                }
                Action::TakeBack => {
                    let r = self.replica();
                    self.replicas[r].held = true;
                }
            }
            self.check_journal_objects().await?;
        }
        self.quiesce().await
    }

    /// Which replica the next action acts on.
    fn replica(&mut self) -> usize {
        self.dice.replicas.random_range(0..REPLICAS)
    }

    /// A snapshot of another log in the same bucket, far ahead: never restored.
    pub(super) async fn plant_another_logs_snapshot(&mut self) -> Result<(), String> {
        let dir = self.root.path().join("other");
        let store = PartitionStore::open(&dir.join("o.redb"), 1, 1 << 20).map_err(|e| e.to_string())?;
        store
            .apply(true, |tx| {
                tx.put("k0", "", 1_000, b"\"another log's\"")?;
                tx.mark_applied(1_000, false);
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        let reader = store.read().map_err(|e| e.to_string())?;
        self.snapshots.create(NAMESPACE, 0, 1, reader, OTHER_LOG).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A writer: a new mutation, or a retry (same write id) of one whose append failed.
    pub(super) async fn write(&mut self) {
        let mutation = if !self.retries.is_empty() && self.dice.retries.random_bool(0.5) {
            let i = self.dice.retries.random_range(0..self.retries.len());
            count(&STATS.retries);
            self.retries.swap_remove(i)
        } else {
            self.new_mutation()
        };
        // The writer's clock (the world's, or skewed): the same bytes for the same seed.
        let payload = Bytes::from(crate::codec::encode_at(&mutation, self.writer_clock_ms()));
        match self.log.append(&tp(), payload).await {
            Ok(offset) => {
                count(&STATS.writes_acknowledged);
                for op in &mutation.ops {
                    self.versions.insert(op.pk.clone(), offset);
                }
            }
            // The outcome is unknown (or it failed): retry it, with its write id when it has one.
            Err(_) if !mutation.write_id.is_empty() => {
                count(&STATS.writes_failed);
                self.retries.push(mutation)
            }
            Err(_) => count(&STATS.writes_failed),
        }
    }

    /// What a writer's clock says now: the world's, unless this step's
    /// faults stepped it a day forward or far back.
    pub(super) fn writer_clock_ms(&self) -> u64 {
        match (self.faults.clock_ahead, self.faults.clock_behind) {
            (true, _) => self.clock_ms + CLOCK_AHEAD_MS,
            (false, true) => self.clock_ms / 4,
            (false, false) => self.clock_ms,
        }
    }

    /// A deployment, as the API appends it (one entry; not retried: the
    /// next deployment is a new version): the counter with fuel near a
    /// call's need or plenty, the timers, a removal, or a module that does
    /// not load (refused alike everywhere).
    pub(super) async fn deploy(&mut self) {
        use base64::Engine as _;
        let wasm = |module: &[u8]| base64::engine::general_purpose::STANDARD.encode(module);
        let rng = &mut self.dice.procedures;
        let (name, definition) = match rng.random_range(0..10u32) {
            0..5 => {
                let fuel = COUNTER_FUEL[rng.random_range(0..COUNTER_FUEL.len())];
                ("counter", serde_json::json!({"runtime": "wasm", "module": wasm(COUNTER), "fuel_per_record": fuel}))
            }
            5..8 => ("timers", serde_json::json!({"runtime": "wasm", "module": wasm(TIMERS)})),
            8 => ("counter", serde_json::json!({"runtime": "wasm", "removed": true})),
            _ => ("timers", serde_json::json!({"runtime": "wasm", "module": wasm(b"not wasm")})),
        };
        let op = Op { pk: String::new(), sk: name.into(), kind: OpKind::Procedure(Bytes::from(definition.to_string())), condition: None };
        let mutation = Mutation { ops: vec![op], ..Default::default() };
        let payload = Bytes::from(crate::codec::encode_at(&mutation, self.writer_clock_ms()));
        if self.log.append(&tp(), payload).await.is_ok() {
            count(&STATS.deployments);
        }
    }

    /// A holder's tick: its clock (right or skewed), nothing else.
    pub(super) async fn tick(&mut self) {
        let payload = Bytes::from(crate::codec::encode_tick(self.writer_clock_ms()));
        if self.log.append(&tp(), payload).await.is_ok() {
            count(&STATS.ticks);
        }
    }

    pub(super) fn new_mutation(&mut self) -> Mutation {
        let rng = &mut self.dice.writes;
        let ops_count = rng.random_range(1..=2usize);
        let mut ops = Vec::with_capacity(ops_count);
        for _ in 0..ops_count {
            let pk = KEYS[rng.random_range(0..KEYS.len())].to_string();
            let condition = match rng.random_range(0..10u32) {
                0..2 => Some(Condition::IfAbsent),
                2..5 => Some(Condition::IfVersion(self.versions.get(&pk).copied().unwrap_or(0))),
                _ => None,
            };
            // "boom" makes the counter trap: a dead letter, alike everywhere.
            let value = match rng.random_bool(0.05) {
                true => "\"boom\"".to_string(),
                false => format!("{}", rng.random_range(0..1_000u32)),
            };
            let kind = if rng.random_bool(0.15) { OpKind::Delete } else { OpKind::Put(Bytes::from(value)) };
            ops.push(Op { pk, sk: String::new(), kind, condition });
        }
        let write_id = if rng.random_bool(0.6) {
            self.next_write_id += 1;
            Bytes::from(format!("w{}", self.next_write_id))
        } else {
            Bytes::new()
        };
        Mutation { write_id, ops, ..Default::default() }
    }

    /// An offset without an entry (a Kafka transaction marker).
    pub(super) fn marker(&mut self) {
        self.log.append_marker(&tp());
    }

    /// One step of replica `r`'s apply loop: open if needed, else read and apply a batch.
    pub(super) async fn apply_step(&mut self, r: usize) -> Result<(), String> {
        let replica = &mut self.replicas[r];
        if !replica.held || replica.refused.is_some() {
            return Ok(());
        }
        if replica.reader.is_none() {
            return self.open(r).await;
        }
        let max = self.dice.batches.random_range(1..=BATCH_MAX);
        let replica = &mut self.replicas[r];
        let batch = replica.reader.as_mut().expect("open").next_batch(max, std::time::Duration::ZERO).await;
        match batch {
            Ok(entries) if entries.is_empty() => {
                let position = replica.reader.as_ref().and_then(|reader| reader.position());
                if let Some(position) = position.filter(|p| *p > replica.handle.applied_next()) {
                    if !crate::apply::skip_to(&replica.handle, position) {
                        return Err(format!("replica {r}: skipping markers refused it: {:?}", replica.handle.status()));
                    }
                }
            }
            Ok(entries) => {
                if !crate::apply::apply(&replica.handle, &replica.procedures, entries).await {
                    return Err(format!("replica {r}: applying refused it: {:?}", replica.handle.status()));
                }
            }
            // Retention overtook the reader: open again (restore or refuse), as the loop does.
            Err(LogError::OffsetOutOfRange { .. }) => {
                count(&STATS.overtaken_readers);
                replica.reader = None
            }
            Err(_) => {}
        }
        self.check_hash(r)?;
        if self.dice.flushes.random_bool(0.3) {
            self.flush(r).await?;
        }
        Ok(())
    }

    pub(super) async fn open(&mut self, r: usize) -> Result<(), String> {
        let before = self.replicas[r].handle.applied_next();
        for _ in 0..4 {
            let replica = &mut self.replicas[r];
            match try_open(&replica.handle, self.log.as_ref(), &self.recovery).await {
                Ok((reader, _end)) => {
                    if replica.handle.applied_next() != before {
                        count(&STATS.restores);
                    }
                    replica.reader = Some(reader);
                    return self.check_hash(r);
                }
                Err(Step::Again) => continue,
                Err(Step::Retry(_)) => return Ok(()),
                Err(Step::Refuse(reason)) => {
                    replica.refused = Some(reason);
                    return Ok(());
                }
            }
        }
        Err(format!("replica {r}: opening kept recovering without end"))
    }

    /// Makes the store durable and keeps a copy: what a crash returns to.
    pub(super) async fn flush(&mut self, r: usize) -> Result<(), String> {
        let replica = &self.replicas[r];
        if !crate::apply::flush(&replica.handle, self.log.as_ref()).await {
            return Err(format!("replica {r}: flushing refused it: {:?}", replica.handle.status()));
        }
        let store = replica.handle.store();
        std::fs::copy(store.path(), Replica::durable_path(&replica.dir)).map_err(|e| format!("keeping the durable image: {e}"))?;
        Ok(())
    }

    /// Equal applied offsets, equal state hashes, on every replica, always;
    /// and where the log stamps its entries, no replica's log time is more
    /// than the bound past the latest stamp (no writer's clock moves it).
    pub(super) fn check_hash(&mut self, r: usize) -> Result<(), String> {
        let view = self.replicas[r].handle.read_view().map_err(|e| e.to_string())?;
        let state = view.reader.state().map_err(|e| e.to_string())?;
        if let Some(stamp_max) = self.log.stamp_max().filter(|_| self.dice.stamps) {
            let log_time_ms = view.reader.log_time_ms().map_err(|e| e.to_string())?;
            if log_time_ms > stamp_max + crate::procedure::log_time::AHEAD_OF_LOG_MS_MAX {
                return Err(format!("replica {r}'s log time {log_time_ms} ms is past the log's latest stamp {stamp_max} ms + 1 s"));
            }
        }
        drop(view);
        match self.hashes.get(&state.applied_next) {
            Some(seen) if *seen != state.state_hash => Err(format!(
                "replica {r} at applied offset {} has state hash {}, another replica had {} there",
                state.applied_next,
                state.state_hash.to_hex(),
                seen.to_hex()
            )),
            Some(_) => Ok(()),
            None => {
                self.hashes.insert(state.applied_next, state.state_hash);
                Ok(())
            }
        }
    }

    /// A snapshot of a serving replica, at whatever it has applied.
    pub(super) async fn snapshot(&mut self) -> Result<(), String> {
        let r = self.replica();
        let replica = &self.replicas[r];
        if !replica.status_serving() {
            return Ok(());
        }
        let reader = replica.handle.store().read().map_err(|e| e.to_string())?;
        let report = self.snapshots.create(NAMESPACE, 0, 1, reader, LOG_IDENTITY).await.map_err(|e| e.to_string())?;
        count(&STATS.snapshots);
        self.log.snapshot_taken(report.applied_next);
        Ok(())
    }

    /// Retention deletes a prefix of the log, never past the newest snapshot
    /// of this log (a replica behind it restores it and reads on).
    pub(super) fn retention(&mut self) {
        let floor = self.log.snapshot_floor();
        if floor > 0 {
            let to = self.dice.retention.random_range(0..=floor);
            self.log.delete_below(to);
        }
    }

    /// Kills replica `r`: what it did not flush is lost; `wipe` loses the store too.
    /// The restarted replica opens a new incarnation of the store file (the
    /// durable image, or nothing), so the old one is never touched while open.
    pub(super) fn crash(&mut self, r: usize, wipe: bool) {
        count(if wipe { &STATS.wipes } else { &STATS.crashes });
        let (dir, held, generation) = (self.replicas[r].dir.clone(), self.replicas[r].held, self.replicas[r].generation + 1);
        let durable = Replica::durable_path(&dir);
        if wipe {
            let _ = std::fs::remove_file(&durable);
        } else if durable.exists() {
            std::fs::copy(&durable, Replica::store_path(&dir, generation)).expect("restoring the durable image");
        }
        let mut reopened = Replica::open(dir.clone(), generation);
        reopened.held = held;
        let old = std::mem::replace(&mut self.replicas[r], reopened);
        drop(old);
        let _ = std::fs::remove_file(Replica::store_path(&dir, generation - 1));
    }

    /// The replica group moves the partition away: the replica stops reading.
    pub(super) fn let_go(&mut self, r: usize) {
        let replica = &mut self.replicas[r];
        replica.held = false;
        replica.reader = None;
    }

    /// Heals every fault, takes every replica back, and runs them until
    /// each has reached the log's end; then compares each with the model.
    pub(super) async fn quiesce(&mut self) -> Result<(), String> {
        self.step = STEPS;
        self.log.heal();
        if let Some(switch) = &self.objects_switch {
            switch.set_failing(false);
        }
        self.faults = Faults::default();
        for replica in &mut self.replicas {
            replica.held = true;
        }
        self.drain_journals().await?;
        self.catch_up().await?;
        let model = model::apply_all(&self.log.history());
        STATS.lane_ahead.fetch_add(model.lane_ahead, Ordering::Relaxed);
        STATS.lane_repeated.fetch_add(model.lane_repeated, Ordering::Relaxed);
        self.compare_with_model(&model.records)?;
        self.check_journaled(&model.decided)?;
        self.check_order(&model.decided)
    }

    /// Runs every replica until each has reached the log's end (bounded:
    /// one still behind after `QUIESCE_ROUNDS_MAX` rounds is stuck).
    pub(super) async fn catch_up(&mut self) -> Result<(), String> {
        let end = self.log.end_offset(&tp()).await.map_err(|e| e.to_string())?;
        for round in 0..QUIESCE_ROUNDS_MAX {
            let mut done = true;
            for r in 0..REPLICAS {
                if let Some(reason) = &self.replicas[r].refused {
                    return Err(format!("replica {r} was refused (every gap is covered by a snapshot): {reason}"));
                }
                if self.replicas[r].handle.applied_next() < end || self.replicas[r].reader.is_none() {
                    done = false;
                    self.apply_step(r).await?;
                }
            }
            if done {
                break;
            }
            if round + 1 == QUIESCE_ROUNDS_MAX {
                let stuck: Vec<String> = self
                    .replicas
                    .iter()
                    .enumerate()
                    .map(|(i, r)| format!("replica {i} at {} ({:?})", r.handle.applied_next(), r.handle.status()))
                    .collect();
                return Err(format!("silently stuck below the log's end {end}: {}", stuck.join(", ")));
            }
        }
        Ok(())
    }

    /// Compares every replica, caught up, with the model's records.
    fn compare_with_model(&self, expected: &BTreeMap<String, (u64, Vec<u8>)>) -> Result<(), String> {
        for (r, replica) in self.replicas.iter().enumerate() {
            let mut records = BTreeMap::new();
            let view = replica.handle.read_view().map_err(|e| e.to_string())?;
            view.reader
                .scan_all(|record| {
                    if !PROCEDURE_KEYS.contains(&record.pk.as_str()) {
                        records.insert(record.pk.clone(), (record.version, record.value.clone()));
                    }
                })
                .map_err(|e| e.to_string())?;
            if records != *expected {
                return Err(format!("replica {r} holds {records:?}, the model says {expected:?}"));
            }
            if replica.handle.status() != PartitionStatus::Serving && replica.handle.status() != PartitionStatus::CatchingUp {
                return Err(format!("replica {r} ends {:?}", replica.handle.status()));
            }
        }
        Ok(())
    }
}

/// The run's journal copies: in memory, in three runs of four, with the
/// switch of their outages.
fn journal_objects(dice: &Dice) -> Option<(crate::journal::objects::JournalObjects, Arc<super::objects::FlakyObjects>)> {
    dice.journal_objects.then(|| {
        let (store, switch) = super::objects::flaky_objects(dice.objects_salt);
        (crate::journal::objects::JournalObjects::new(store, &object_store::path::Path::from("sim")), switch)
    })
}

pub(super) fn tp() -> TopicPartition {
    TopicPartition { topic: Arc::from(NAMESPACE), partition: 0 }
}

/// Stores live in memory-backed `/dev/shm` when there is one: many small runs.
pub(super) fn sim_tmp() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Runs seeds `first..first + count` on `threads` threads; the failures.
pub(super) fn run_seeds(first: u64, count: u64, threads: usize) -> Vec<Failure> {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(first));
    let failures = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (next, failures) = (next.clone(), failures.clone());
            std::thread::spawn(move || loop {
                let seed = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if seed >= first + count {
                    return;
                }
                let outcome = std::panic::catch_unwind(|| run_seed(seed));
                let failure = match outcome {
                    Ok(Ok(())) => continue,
                    Ok(Err(failure)) => failure,
                    Err(panic) => Failure {
                        seed,
                        step: 0,
                        what: format!(
                            "panicked: {}",
                            panic
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default()
                        ),
                    },
                };
                eprintln!("{failure}");
                failures.lock().push(failure);
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a sim worker");
    }
    let mut failures = std::mem::take(&mut *failures.lock());
    failures.sort_by_key(|f| f.seed);
    failures
}
