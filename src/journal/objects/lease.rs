//! The owner's lease on its journal in object storage: proof that it is
//! alive (`renewed_at_ms`), the object sequence numbers it reserved
//! (`seq_floor`), and its released marks (`released`), below which a claim
//! leaves a lane's entries out (`node::claims::plan`).
//!
//! **The marks invariant.** Whatever the owner removes from a lane of its
//! objects, the lease says first. The owner deletes an object once every
//! entry in it is released, and the uploader passes released entries the
//! local journal no longer has; either leaves older objects holding a lane
//! with entries missing above them. Were the lease's marks below what was
//! removed, a claim at that moment would see a gap, append nothing past
//! it, and the acknowledged writes after it would never apply once the
//! owner was lost (review of issue 36). So every deletion and every pass
//! first makes sure the lease holds marks at least as high
//! (`LeaseKeeper::cover`), and every renewal writes the local journal's
//! marks as they are then. Renewals are serialized: each reads the marks
//! after the last one wrote, so the lease's marks only grow.
//!
//! Owns: writing the lease. Never: deletes or puts entries (the journal's
//! objects and the uploader do, after `cover`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{JournalObjects, LaneKey, LaneMark, LocalEntries};

/// Writes the lease of one journal, with its owner's current marks.
pub(super) struct LeaseKeeper {
    objects: JournalObjects,
    journal_id: String,
    node: String,
    local: Arc<dyn LocalEntries>,
    /// The marks at open (where the local journal starts may be past what
    /// it released): each lane's mark is at least this.
    floor: Vec<LaneMark>,
    /// Past the object sequence numbers reserved (`Lease::seq_floor`).
    reserved_end: Arc<AtomicU64>,
    /// The marks of the last lease written; its lock serializes renewals.
    written: tokio::sync::Mutex<HashMap<LaneKey, u64>>,
}

impl LeaseKeeper {
    pub(super) fn new(
        objects: JournalObjects,
        journal_id: &str,
        node: &str,
        local: Arc<dyn LocalEntries>,
        floor: Vec<LaneMark>,
        reserved_end: Arc<AtomicU64>,
    ) -> LeaseKeeper {
        LeaseKeeper {
            objects,
            journal_id: journal_id.to_string(),
            node: node.to_string(),
            local,
            floor,
            reserved_end,
            written: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Writes the lease now, with the marks as they are.
    pub(super) async fn renew(&self) -> Result<(), String> {
        let mut written = self.written.lock().await;
        self.write(&mut written).await
    }

    /// Returns once the lease this keeper last wrote holds, for each lane
    /// of `needs`, a mark at least as high (written now if it did not);
    /// then what is below them may be removed from the objects. (The lease
    /// in the store is that one, or a newer one this keeper wrote; a
    /// claimer deletes it only if it was not renewed since its plan,
    /// `JournalObjects::retire`.) Err: the lease could not be written, or
    /// the local journal has not released that far (nothing may go).
    pub(super) async fn cover(&self, needs: &[(LaneKey, u64)]) -> Result<(), String> {
        let mut written = self.written.lock().await;
        if covers(&written, needs) {
            return Ok(());
        }
        self.write(&mut written).await?;
        match needs.iter().find(|(lane, below)| written.get(lane).copied().unwrap_or(0) < *below) {
            None => Ok(()),
            Some(((ns, partition), below)) => Err(format!(
                "the journal's lease cannot say {ns}/{partition} is released below {below}: the local journal released only below {}",
                written.get(&(ns.clone(), *partition)).copied().unwrap_or(0)
            )),
        }
    }

    async fn write(&self, written: &mut HashMap<LaneKey, u64>) -> Result<(), String> {
        let marks = self.marks_now();
        debug_assert!(
            marks.iter().all(|mark| mark.below >= written.get(&(mark.ns.clone(), mark.partition)).copied().unwrap_or(0)),
            "a lease's marks only grow"
        );
        self.objects.renew_lease(&self.journal_id, &self.node, &marks, self.reserved_end.load(Ordering::Relaxed)).await?;
        *written = marks.into_iter().map(|mark| ((mark.ns, mark.partition), mark.below)).collect();
        Ok(())
    }

    /// The local journal's released marks, each at least its mark at open, in lane order.
    fn marks_now(&self) -> Vec<LaneMark> {
        let mut marks: HashMap<LaneKey, u64> = self.local.released_marks().into_iter().map(|m| ((m.ns, m.partition), m.below)).collect();
        for mark in &self.floor {
            let at = marks.entry((mark.ns.clone(), mark.partition)).or_insert(0);
            *at = (*at).max(mark.below);
        }
        let mut marks: Vec<LaneMark> =
            marks.into_iter().filter(|(_, below)| *below > 0).map(|((ns, partition), below)| LaneMark { ns, partition, below }).collect();
        marks.sort_by(|a, b| (&a.ns, a.partition).cmp(&(&b.ns, b.partition)));
        marks
    }
}

/// Whether marks `written` hold every lane of `needs` at least as high.
fn covers(written: &HashMap<LaneKey, u64>, needs: &[(LaneKey, u64)]) -> bool {
    needs.iter().all(|(lane, below)| written.get(lane).copied().unwrap_or(0) >= *below)
}
