//! A partition as the node holds it: its `PartitionHandle` (the store, the
//! applied offset and the waits on it, the status, the outcomes of recent
//! writes, the shared read view and its memo, the fan-out feed) and the `Namespace` that
//! groups a topic's handles. This is what every floor above shares about a
//! partition; only the apply loop changes it (`advance`, `set_status`), and
//! only the node starts and stops holding it (`hold_unless_stopped`, `let_go_if_unpinned`).

pub(crate) mod freshness;
pub(crate) mod handle;
pub(crate) mod namespace;
pub(crate) mod outcome;
pub(crate) mod read_memo;

pub(crate) use self::handle::{PartitionHandle, PartitionStatus, ReadView};
pub(crate) use self::namespace::Namespace;
pub(crate) use self::outcome::Outcome;
