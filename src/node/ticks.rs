//! Procedure ticks: a held partition with procedures that applied nothing
//! for `procedure_tick`, or whose log time is that far behind this node's
//! clock, gets an entry with no operations, only this node's time, so its
//! timers fire in log time when nothing (or nothing that moves the time)
//! is written (docs/procedures.md).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::reserved::Writer;
use super::write::{Entry, WriteRequest};
use super::Node;
use crate::log::TopicPartition;

/// Per held partition: its applied offset at the last tick round (idle
/// when it has not moved since). Bounded by the partitions this node holds.
#[derive(Default)]
pub(super) struct TickRounds {
    seen: Mutex<HashMap<TopicPartition, u64>>,
}

impl Node {
    /// Appends a tick to every held partition that has procedures and applied
    /// nothing since the last round, so their timers fire in log time even
    /// when nothing is written (docs/procedures.md). At most one tick per
    /// held partition per round. Every replica group's holder ticks: ticks
    /// are ordinary entries, so extra ones change nothing but the log time.
    pub(super) async fn append_ticks(&self) {
        let mut held = std::collections::HashSet::new();
        for namespace in self.namespaces() {
            for partition in 0..namespace.partitions {
                let handle = namespace.handle(partition);
                if !handle.is_held() {
                    continue;
                }
                held.insert(handle.tp.clone());
                let applied = handle.applied_next();
                let idle = self.ticks.seen.lock().insert(handle.tp.clone(), applied) == Some(applied);
                let view = handle.read_view();
                let has_procedures = view.as_ref().is_ok_and(|v| v.reader.has_procedures().unwrap_or(false));
                // Entries that do not move the log time (a writer or a
                // strong read's barrier from a node whose clock is behind)
                // keep a partition from being idle: it is ticked too when
                // its log time is a tick interval behind this node's clock.
                let behind = view.as_ref().is_ok_and(|v| {
                    v.reader
                        .log_time_ms()
                        .is_ok_and(|log_ms| crate::codec::now_ms().saturating_sub(log_ms) >= self.config.procedure_tick.as_millis() as u64)
                });
                if !(idle || behind) || !has_procedures {
                    continue;
                }
                let tick = WriteRequest::new(Writer::Procedures, partition, Entry::Tick);
                match self.write_sequenced(&namespace, tick).await {
                    // Idle again once the tick is applied and nothing else came.
                    Ok(offset) => {
                        self.ticks.seen.lock().insert(handle.tp.clone(), offset + 1);
                        crate::metrics::PROCEDURE_TICKS.inc();
                    }
                    Err(e) => tracing::debug!(tp = %handle.tp, error = %e, "appending a tick failed; the next round tries again"),
                }
            }
        }
        // Partitions let go are forgotten: the table stays bounded by what is held.
        self.ticks.seen.lock().retain(|tp, _| held.contains(tp));
    }
}
