//! Partition snapshots in object storage (`object_store`: `file://`,
//! `memory://`, and the crate's other backends), so a new or wiped replica
//! restores a partition and catches up from the log instead of replaying it
//! all.
//!
//! Layout under the store's root:
//!
//! ```text
//! tern/<namespace>/<partition>/chunks/<blake3 hex>                 zstd chunk (format.rs)
//! tern/<namespace>/<partition>/manifests/<applied_next:020>.json   sealed manifest, written last
//! ```
//!
//! Taking a snapshot reads one MVCC view of the store (one applied offset),
//! cuts it into content-defined chunks, uploads the chunks the store does not
//! have yet (incremental: unchanged chunks are shared), then the manifest.
//! Restoring takes the newest manifest that verifies, checks every chunk's
//! hash, rebuilds the store and checks the recomputed state hash and record
//! count against the manifest; any failure falls back to the next older
//! snapshot.

mod create;
mod error;
pub mod format;
/// The namespaces a snapshot store holds (what `--restore` re-creates).
mod namespaces;
mod prune;
mod restore;
mod snapshots;

pub use self::create::SnapshotReport;
use self::error::store_error;
pub use self::error::SnapshotError;
pub use self::namespaces::SnapshottedNamespace;
pub use self::restore::RestoreTarget;
use self::snapshots::REQUESTS_IN_FLIGHT_MAX;
pub use self::snapshots::{Snapshots, CA_FILE_OPTION};
