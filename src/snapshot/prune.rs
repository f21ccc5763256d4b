//! Pruning: keep the newest `retain` manifests of a partition, and delete
//! chunks no manifest names once they are older than `CHUNK_GC_GRACE`
//! (another writer may be mid-upload); and deleting every snapshot of a
//! deleted namespace.

use super::format::Manifest;
use super::snapshots::Snapshots;
use super::store_error;
use super::SnapshotError;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt};

/// Unreferenced chunks younger than this survive pruning (see `prune`).
pub(super) const CHUNK_GC_GRACE: chrono::TimeDelta = chrono::TimeDelta::hours(1);

impl Snapshots {
    /// Keeps the `retain` newest snapshots of a partition and deletes the
    /// older manifests, then the chunks no remaining manifest names. A chunk
    /// younger than `CHUNK_GC_GRACE` is kept even if unreferenced: another
    /// writer may have uploaded it for a manifest it has not written yet.
    pub async fn prune(&self, namespace: &str, partition: u32, retain: usize) -> Result<usize, SnapshotError> {
        assert!(retain >= 1, "at least one snapshot is kept");
        let manifests = self.list(namespace, partition).await?;
        if manifests.len() <= retain {
            return Ok(0);
        }
        let mut referenced = std::collections::HashSet::new();
        for (_, path) in &manifests[..retain] {
            let bytes = self.store.get(path).await.map_err(store_error)?.bytes().await.map_err(store_error)?;
            // An unreadable kept manifest protects nothing; it is never restored either.
            if let Ok(manifest) = Manifest::open(&bytes) {
                referenced.extend(manifest.chunks.into_iter().map(|c| c.hash));
            }
        }
        for (_, path) in &manifests[retain..] {
            self.store.delete(path).await.map_err(store_error)?;
        }
        let chunks_dir = self.partition_dir(namespace, partition).join("chunks");
        let chunks: Vec<object_store::ObjectMeta> = self.store.list(Some(&chunks_dir)).try_collect().await.map_err(store_error)?;
        let grace_start = chrono::Utc::now() - CHUNK_GC_GRACE;
        let mut deleted = 0;
        for chunk in chunks {
            let name = chunk.location.filename().unwrap_or_default().to_string();
            if !referenced.contains(&name) && chunk.last_modified < grace_start {
                self.store.delete(&chunk.location).await.map_err(store_error)?;
                deleted += 1;
            }
        }
        Ok(manifests.len() - retain + deleted)
    }

    /// Deletes every snapshot of `namespace` (every object under
    /// `tern/<namespace>/`, whichever log they were of): its manifests
    /// first, so a deletion cut short leaves no snapshot to restore, then
    /// the chunks, `DELETE_PAGE_OBJECTS` listed at a time. Returns how many
    /// objects were deleted.
    pub async fn delete_namespace(&self, namespace: &str) -> Result<usize, SnapshotError> {
        let dir = self.root.clone().join("tern").join(namespace);
        let mut deleted = 0;
        for manifests_only in [true, false] {
            let mut listing = self.store.list(Some(&dir));
            let mut page = Vec::with_capacity(DELETE_PAGE_OBJECTS);
            loop {
                let next = listing.try_next().await.map_err(store_error)?;
                let done = next.is_none();
                if let Some(object) = next {
                    let is_manifest = object.location.parts().any(|part| part.as_ref() == "manifests");
                    if is_manifest || !manifests_only {
                        page.push(object.location);
                    }
                }
                if page.len() >= DELETE_PAGE_OBJECTS || (done && !page.is_empty()) {
                    let batch = std::mem::take(&mut page);
                    let paths = futures::stream::iter(batch.into_iter().map(Ok)).boxed();
                    let mut results = self.store.delete_stream(paths);
                    while let Some(result) = results.next().await {
                        match result {
                            Ok(_) => deleted += 1,
                            // Gone already (another deletion of it): what was wanted.
                            Err(object_store::Error::NotFound { .. }) => {}
                            Err(e) => return Err(store_error(e)),
                        }
                    }
                }
                if done {
                    break;
                }
            }
        }
        Ok(deleted)
    }
}

impl Snapshots {
    /// Deletes one snapshot's manifest (`SnapshotReport::manifest`): it is
    /// never restored; its chunks go with the next prune of the partition.
    pub async fn delete_manifest(&self, manifest: &str) -> Result<(), SnapshotError> {
        let path = object_store::path::Path::parse(manifest).map_err(|e| SnapshotError::Store(e.to_string()))?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(e)),
        }
    }
}

/// Objects a namespace's deletion lists before it deletes them (its memory bound).
const DELETE_PAGE_OBJECTS: usize = 1000;
