//! The owner's lease on its journal in object storage: proof that it is
//! alive (`renewed_at_ms`), the object sequence numbers it reserved
//! (`seq_floor`), and its released marks (`released`), below which a claim
//! leaves a lane's entries out (`node::claims::plan`).
//!
//! **The marks invariant.** What the owner leaves out of a lane of its
//! objects above older objects, the lease says first. The owner deletes
//! an object above one that stays (`ObjectJournal::delete_released`), the
//! uploader passes released entries the local journal no longer has, and
//! a restart loses the carry of a failed put; each leaves older objects
//! holding a lane with entries missing above them. Were the lease's marks
//! below what was left out, a claim at that moment would see a gap, append
//! nothing past it, and the acknowledged writes after it would never apply
//! once the owner was lost (review of issue 36). So such a deletion and
//! such a put first write the lease (`LeaseKeeper::cover`: always written,
//! never judged from what this keeper wrote before, for a claimer may have
//! deleted the lease meanwhile: an owner paused past `journal_claim_after`),
//! an open writes the marks it starts from, and every renewal writes the
//! local journal's marks as they are then. Writes are serialized: each
//! reads the marks after the last one wrote, so the marks this keeper
//! writes only grow.
//!
//! Owns: writing the lease. Never: deletes or puts entries (the journal's
//! objects and the uploader do).

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
    /// The marks of the last lease written (for the check that they only
    /// grow); its lock serializes the writes.
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

    /// Writes the lease now, and returns once it holds, for each lane of
    /// `needs`, a mark at least as high; then what is below them may be
    /// left out of the objects. Always written: the lease this keeper wrote
    /// last may be gone (a claimer retired it while this owner was paused
    /// past `journal_claim_after`). Err: the lease could not be written, or
    /// the local journal has not released that far (nothing may be left out).
    pub(super) async fn cover(&self, needs: &[(LaneKey, u64)]) -> Result<(), String> {
        let mut written = self.written.lock().await;
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
