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

/// A namespace with snapshots here, as its newest readable manifest says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshottedNamespace {
    pub name: String,
    pub partitions: u32,
    /// The log its snapshots were taken of (`Log::identity`:
    /// `embedded:<log id>/<topic>#<uid>`, `kafka:<cluster>/<topic>#<id>`).
    pub log: String,
}

impl SnapshottedNamespace {
    /// The log's part of `log` that is not one topic's: which cluster or
    /// embedded log the snapshots came from.
    pub fn log_origin(&self) -> &str {
        self.log.split_once('/').map_or(self.log.as_str(), |(origin, _)| origin)
    }

    /// The topic the snapshots were taken of (`log` between `/` and `#`).
    pub fn topic(&self) -> &str {
        let rest = self.log.split_once('/').map_or("", |(_, rest)| rest);
        rest.split_once('#').map_or(rest, |(topic, _)| topic)
    }
}

impl Snapshots {
    /// Every namespace with a valid snapshot here whose name `wanted` keeps,
    /// as its newest manifest that opens says, in name order. A namespace
    /// none of whose manifests open is left out, said in the log.
    pub async fn namespaces(&self, wanted: impl Fn(&str) -> bool) -> Result<Vec<SnapshottedNamespace>, SnapshotError> {
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
        for name in names.into_iter().filter(|n| wanted(n)) {
            match self.newest_manifest(&name).await? {
                Some(manifest) => out.push(SnapshottedNamespace { name, partitions: manifest.partitions, log: manifest.log }),
                None => tracing::warn!(ns = %name, "no manifest of this namespace opens; it is not re-created"),
            }
        }
        Ok(out)
    }

    /// A namespace's newest manifest that opens (of any partition, at most
    /// `MANIFESTS_TRIED_MAX` tried).
    async fn newest_manifest(&self, namespace: &str) -> Result<Option<Manifest>, SnapshotError> {
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
                    Ok(manifest) if manifest.namespace == namespace => return Ok(Some(manifest)),
                    Ok(_) | Err(_) => continue,
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_identity_names_its_origin_and_topic() {
        let ns = |log: &str| SnapshottedNamespace { name: "app".into(), partitions: 1, log: log.into() };
        assert_eq!(ns("embedded:L1/app#u7").log_origin(), "embedded:L1");
        assert_eq!(ns("embedded:L1/app#u7").topic(), "app");
        assert_eq!(ns("kafka:C9/tern.app#t3").log_origin(), "kafka:C9");
        assert_eq!(ns("kafka:C9/tern.app#t3").topic(), "tern.app");
        assert_eq!(ns("odd").log_origin(), "odd");
        assert_eq!(ns("odd").topic(), "");
    }
}
