//! The run's menu: which action each step takes (a weighted table), how
//! often each fault strikes (a rate drawn per seed), and the named random
//! streams every other choice draws from.
//!
//! Each fault has a name, a rate drawn for the whole run from
//! [`FAULT_RATES`] by its own stream, and its own stream deciding at each
//! step whether it strikes; each purpose (writes, retries, batch sizes,
//! flushes, retention, which replica) draws from a stream of its own. So
//! adding a fault or an action, or changing how one purpose draws, leaves
//! every other fault's rate and strikes and every other purpose's draws as
//! they were (`streams.rs`); only the action table's own mapping moves.
//!
//! Rates per seed rather than one fixed rate: some seeds run a clean log,
//! some a log failing one step in five, so both the quiet path and the
//! stormy one are walked, and a failure's replay prints which it was.

use super::log::Faults;
use super::streams::{stream, Stream};
use rand::distr::weighted::WeightedIndex;
use rand::distr::Distribution;
use rand::Rng;

/// What one step of a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// A writer appends a new mutation or retries a failed one.
    Write,
    /// One replica's apply loop takes one step (open, or read and apply a batch).
    Apply,
    /// An offset without an entry (a Kafka transaction marker).
    Marker,
    /// A serving replica's snapshot.
    Snapshot,
    /// Retention deletes a prefix of the log (never past the newest snapshot).
    Retention,
    /// A replica crashes, losing what it did not flush.
    Crash,
    /// A replica crashes and loses its store.
    Wipe,
    /// The replica group moves the partition away from a replica.
    LetGo,
    /// The partition comes back to a replica.
    TakeBack,
    /// A procedure is deployed (or removed, or one that does not load).
    Deploy,
    /// A holder appends a tick (its clock, possibly skewed).
    Tick,
    /// A replica loads its procedures again from its store (a restart
    /// that kept the store, a hand-off): at an offset of its own.
    Reload,
    /// A client's write through a node, routed as its write path does:
    /// to the log, or to its journal (ripcord, or asked for).
    ClientWrite,
    /// One turn of a node's sequencer lane: appends what its journal holds,
    /// releases what was seen applied.
    Sequence,
    /// A node stops; its next write or sequencer turn starts it again: its
    /// journal reopens, its lane's memory of appends in flight is gone.
    NodeRestart,
    /// A node is lost with its data directory (its journal lives on only in
    /// object storage, when the run keeps a copy) and comes back with a new one.
    NodeLost,
    /// One step of claiming a lost (or stopped) node's journal: plan and
    /// append its replay, or, once applied, delete its objects and retire it.
    Claim,
}

/// Each action with its weight: of the sum (100), the share of steps that take it.
pub(super) const ACTIONS: [(Action, u32); 17] = [
    (Action::Write, 28),
    (Action::Apply, 30),
    (Action::Marker, 3),
    (Action::Snapshot, 5),
    (Action::Retention, 4),
    (Action::Crash, 4),
    (Action::Wipe, 2),
    (Action::LetGo, 3),
    (Action::TakeBack, 2),
    (Action::Deploy, 2),
    (Action::Tick, 2),
    (Action::Reload, 2),
    (Action::ClientWrite, 7),
    (Action::Sequence, 3),
    (Action::NodeRestart, 1),
    (Action::NodeLost, 1),
    (Action::Claim, 1),
];

/// A fault of the simulated log, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// An append fails before its entry lands: nothing appended.
    AppendFailsBefore,
    /// An append lands, but the writer hears an error: outcome unknown.
    AppendFailsAfter,
    /// A read fails.
    ReadFails,
    /// A writer's clock is a day ahead (stepped forward).
    ClockAhead,
    /// A writer's clock is far behind.
    ClockBehind,
    /// Object storage fails the journals' entry and claim puts and every
    /// delete (`sim/objects.rs`).
    ObjectsFail,
}

/// Every fault the world can inject.
pub(super) const FAULTS: [Fault; 6] =
    [Fault::AppendFailsBefore, Fault::AppendFailsAfter, Fault::ReadFails, Fault::ClockAhead, Fault::ClockBehind, Fault::ObjectsFail];

/// The rates a seed may draw for each fault, per step: never, rarely,
/// sometimes, often. The largest stays well below one so writes still land.
pub(super) const FAULT_RATES: [f64; 4] = [0.0, 0.02, 0.05, 0.2];

/// The rates a seed may draw for one append failing on its own: higher
/// than a step's, since it takes one failing among several that land.
pub(super) const FLAKY_APPEND_RATES: [f64; 4] = [0.0, 0.05, 0.2, 0.4];

impl Fault {
    /// The fault's name: its streams' names, and what a replay prints.
    pub(super) fn name(self) -> &'static str {
        match self {
            Fault::AppendFailsBefore => "append_fails_before",
            Fault::AppendFailsAfter => "append_fails_after",
            Fault::ReadFails => "read_fails",
            Fault::ClockAhead => "clock_ahead",
            Fault::ClockBehind => "clock_behind",
            Fault::ObjectsFail => "objects_fail",
        }
    }
}

/// One fault in a run: its rate and the stream deciding each step.
struct FaultDice {
    fault: Fault,
    rate: f64,
    strikes: Stream,
}

/// Every random choice of one run, each from its named stream.
pub(super) struct Dice {
    actions: Stream,
    action_table: WeightedIndex<u32>,
    faults: Vec<FaultDice>,
    /// Which replica an action acts on.
    pub(super) replicas: Stream,
    /// A new mutation's keys, conditions, values and write id.
    pub(super) writes: Stream,
    /// Whether a writer retries a failed write, and which.
    pub(super) retries: Stream,
    /// How many entries an apply step reads.
    pub(super) batches: Stream,
    /// Whether an apply step flushes.
    pub(super) flushes: Stream,
    /// How far retention deletes.
    pub(super) retention: Stream,
    /// Which procedure a deployment deploys, and its bounds.
    pub(super) procedures: Stream,
    /// How far the world's clock moves each step.
    pub(super) clock: Stream,
    /// Which node a ripcord action acts on.
    pub(super) nodes: Stream,
    /// Whether gossip's word on what replicas applied is fresh or stale.
    pub(super) gossip: Stream,
    /// Which journal a claim takes, and whether a waiting claimer stops.
    pub(super) claims: Stream,
    /// Whether a journaled write carries a write id.
    pub(super) journal_ids: Stream,
    /// Whether a client's write through a node asks to be journaled.
    pub(super) routes: Stream,
    /// Whether a client goes away while its write is being journaled.
    pub(super) cancels: Stream,
    /// Whether a journaled write has a partner in another lane, and when
    /// that lane's entries are applied (released).
    pub(super) side: Stream,
    /// Whether a stopped node's journal has an entry damaged on disk, and which.
    pub(super) journal_damage: Stream,
    /// Whether journals keep a copy in object storage (drawn once per run).
    pub(super) journal_objects: bool,
    /// Which refusals of object storage were done all the same (drawn once
    /// per run; with each request's path and count: `sim::objects`).
    pub(super) objects_salt: u64,
    /// Whether the log stamps what it appends (drawn once per run).
    pub(super) stamps: bool,
    /// How often one append among several in flight fails on its own
    /// (drawn once per run from `FLAKY_APPEND_RATES`): the sequencer hands a lane's
    /// appends to the log together, and one may fail while those after it
    /// land. Half fail before landing, half after.
    pub(super) flaky_append_rate: f64,
}

impl Dice {
    pub(super) fn new(seed: u64) -> Dice {
        let action_table = WeightedIndex::new(ACTIONS.iter().map(|(_, weight)| *weight)).expect("the action table has positive weights");
        let faults = FAULTS
            .iter()
            .map(|&fault| {
                let mut rates = stream(seed, &format!("fault/{}/rate", fault.name()));
                let rate = FAULT_RATES[rates.random_range(0..FAULT_RATES.len())];
                FaultDice { fault, rate, strikes: stream(seed, &format!("fault/{}/strikes", fault.name())) }
            })
            .collect();
        Dice {
            actions: stream(seed, "actions"),
            action_table,
            faults,
            replicas: stream(seed, "replicas"),
            writes: stream(seed, "writes"),
            retries: stream(seed, "retries"),
            batches: stream(seed, "batches"),
            flushes: stream(seed, "flushes"),
            retention: stream(seed, "retention"),
            procedures: stream(seed, "procedures"),
            clock: stream(seed, "clock"),
            nodes: stream(seed, "nodes"),
            gossip: stream(seed, "gossip"),
            claims: stream(seed, "claims"),
            journal_ids: stream(seed, "journal_ids"),
            routes: stream(seed, "routes"),
            cancels: stream(seed, "cancels"),
            side: stream(seed, "side"),
            journal_damage: stream(seed, "journal_damage"),
            journal_objects: stream(seed, "journal_objects").random_bool(0.75),
            objects_salt: stream(seed, "objects_salt").random(),
            stamps: stream(seed, "stamps").random_bool(0.5),
            flaky_append_rate: FLAKY_APPEND_RATES[stream(seed, "fault/flaky_append/rate").random_range(0..FLAKY_APPEND_RATES.len())],
        }
    }

    /// The next step's action.
    pub(super) fn action(&mut self) -> Action {
        ACTIONS[self.action_table.sample(&mut self.actions)].0
    }

    /// The faults in force for the next step: each fault's own stream
    /// decides, at the rate this seed drew for it.
    pub(super) fn faults(&mut self) -> Faults {
        let mut faults = Faults::default();
        for dice in &mut self.faults {
            // Drawn even at rate 0, so each fault's strikes keep their
            // positions in its stream whatever the rate.
            let strikes = dice.strikes.random::<f64>() < dice.rate;
            match dice.fault {
                Fault::AppendFailsBefore => faults.append_fails_before = strikes,
                Fault::AppendFailsAfter => faults.append_fails_after = strikes,
                Fault::ReadFails => faults.read_fails = strikes,
                Fault::ClockAhead => faults.clock_ahead = strikes,
                Fault::ClockBehind => faults.clock_behind = strikes,
                Fault::ObjectsFail => faults.objects_fail = strikes,
            }
        }
        faults
    }

    /// The rate each fault strikes at in this run.
    pub(super) fn fault_rates(&self) -> Vec<(Fault, f64)> {
        self.faults.iter().map(|dice| (dice.fault, dice.rate)).collect()
    }

    /// The rates as a replay prints them: `append_fails_before 0.05, ...`.
    pub(super) fn fault_rates_text(&self) -> String {
        let rates: Vec<String> = self.faults.iter().map(|dice| format!("{} {}", dice.fault.name(), dice.rate)).collect();
        format!(
            "{}, flaky_append {}; the log {} its entries; journals keep {} in object storage",
            rates.join(", "),
            self.flaky_append_rate,
            if self.stamps { "stamps" } else { "does not stamp" },
            if self.journal_objects { "a copy" } else { "no copy" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_table_weighs_every_action_once() {
        let total: u32 = ACTIONS.iter().map(|(_, weight)| weight).sum();
        assert_eq!(total, 100, "weights read as percentages");
        for (i, (action, weight)) in ACTIONS.iter().enumerate() {
            assert!(*weight > 0, "{action:?} is never taken");
            assert!(ACTIONS[..i].iter().all(|(other, _)| other != action), "{action:?} listed twice");
        }
    }

    #[test]
    fn every_fault_has_its_own_name() {
        for (i, fault) in FAULTS.iter().enumerate() {
            assert!(FAULTS[..i].iter().all(|other| other.name() != fault.name()));
        }
    }

    /// The menu's promise: a fault's rate and strikes come from its own
    /// streams, so they do not move when another fault or purpose draws
    /// more. Here a writer drawing extra values changes nothing else.
    #[test]
    fn drawing_more_for_one_purpose_moves_no_other() {
        let run = |extra_write_draws: usize| {
            let mut dice = Dice::new(42);
            let mut seen = Vec::new();
            for _ in 0..200 {
                for _ in 0..extra_write_draws {
                    let _: u64 = dice.writes.random();
                }
                seen.push((dice.action(), format!("{:?}", dice.faults()), dice.replicas.random_range(0..3usize)));
            }
            (seen, dice.fault_rates_text())
        };
        assert_eq!(run(0), run(3));
    }

    /// CI's 200 seeds walk every rate of every fault, clean log to stormy.
    #[test]
    fn seeds_draw_different_rates() {
        // Each fault's rate is its own draw, uniform over FAULT_RATES: over
        // 200 seeds every rate is expected 50 times per fault; fewer than 20
        // would mean the draw is skewed (binomial tail far below 1e-6).
        let runs: Vec<Vec<(Fault, f64)>> = (1..=200).map(|seed| Dice::new(seed).fault_rates()).collect();
        let combinations: std::collections::BTreeSet<String> = runs.iter().map(|rates| format!("{rates:?}")).collect();
        assert!(combinations.len() > 20, "200 seeds drew only {} combinations of rates", combinations.len());
        for (index, fault) in runs[0].iter().map(|(fault, _)| *fault).enumerate() {
            for rate in FAULT_RATES {
                let seeds = runs.iter().filter(|rates| rates[index] == (fault, rate)).count();
                assert!(seeds >= 20, "only {seeds} of 200 seeds drew rate {rate} for {fault:?}");
            }
        }
    }
}
