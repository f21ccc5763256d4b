//! Which namespaces a snapshot store holds, and each one's partition count:
//! what `--restore` re-creates on a new log before restoring their
//! partitions (a namespace the new node would not make by itself would
//! otherwise stay behind in the bucket).

use object_store::ObjectStoreExt;

use super::error::{store_error, SnapshotError};
use super::format::Manifest;
use super::restore::MANIFEST_BYTES_MAX;
use super::Snapshots;

/// The most namespaces one restore re-creates (a bucket holding more is
/// refused, not half restored).
const NAMESPACES_RESTORED_MAX: usize = 10_000;
/// Manifests read per namespace to learn its partition count, newest
/// first, before giving up on it.
const MANIFESTS_TRIED_MAX: usize = 8;

impl Snapshots {
    /// Every namespace with a valid snapshot here, with its partition count
    /// (from its newest manifest that opens), in name order. A namespace
    /// none of whose manifests open is left out, said in the log.
    pub async fn namespaces(&self) -> Result<Vec<(String, u32)>, SnapshotError> {
        let root = self.root.clone().join("tern");
        let listed = self.store.list_with_delimiter(Some(&root)).await.map_err(store_error)?;
        let mut names: Vec<String> = listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_string)).collect();
        if names.len() > NAMESPACES_RESTORED_MAX {
            return Err(SnapshotError::Partition(format!(
                "the snapshot store holds {} namespaces, more than the {NAMESPACES_RESTORED_MAX} one restore re-creates",
                names.len()
            )));
        }
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.partition_count(&name).await? {
                Some(partitions) => out.push((name, partitions)),
                None => tracing::warn!(ns = %name, "no manifest of this namespace opens; it is not re-created"),
            }
        }
        Ok(out)
    }

    /// The partition count a namespace's newest readable manifest states.
    async fn partition_count(&self, namespace: &str) -> Result<Option<u32>, SnapshotError> {
        let dir = self.root.clone().join("tern").join(namespace);
        let partitions: Vec<u32> = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(store_error)?
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename()?.parse().ok())
            .collect();
        let mut tried = 0;
        for partition in partitions {
            for (_, path) in self.list(namespace, partition).await? {
                if tried == MANIFESTS_TRIED_MAX {
                    return Ok(None);
                }
                tried += 1;
                let object = self.store.get(&path).await.map_err(store_error)?;
                if object.meta.size > MANIFEST_BYTES_MAX as u64 {
                    continue;
                }
                let bytes = object.bytes().await.map_err(store_error)?;
                match Manifest::open(&bytes) {
                    Ok(manifest) if manifest.namespace == namespace => return Ok(Some(manifest.partitions)),
                    Ok(_) | Err(_) => continue,
                }
            }
        }
        Ok(None)
    }
}
