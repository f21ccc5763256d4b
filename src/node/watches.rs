//! Opening a watch on this node: its namespace, and a position it resumes
//! from that is not beyond the log's end (another cluster's, or a lost log's,
//! would silently skip every event up to it).

use super::health::LOG_END_WAIT;
use super::Node;
use crate::partition::Namespace;

impl Node {
    /// Opens a watch on namespace `name` (see `Watches::open`). A position
    /// beyond the log's end (another cluster's, or a lost log's) is refused:
    /// resuming there would silently skip every event up to it.
    pub async fn open_watch(
        &self,
        name: &str,
        filter: crate::fanout::Filter,
        from: crate::watch::Since,
        mode: crate::fanout::Mode,
        outlet: crate::watch::Outlet,
        connection: crate::watch::ConnectionId,
    ) -> Result<(crate::watch::Session, crate::watch::Start), crate::watch::WatchError> {
        let ns = self.namespace(name).ok_or_else(|| crate::watch::WatchError::NamespaceNotFound(name.to_string()))?;
        if let crate::watch::Since::Cursor(cursor) = &from {
            self.check_position_not_ahead(&ns, cursor).await?;
        }
        self.watches.open(ns, filter, from, mode, outlet, connection)
    }

    /// Refuses a cursor with a mark past the log's end. Only marks past this
    /// replica's applied offset ask the log (once each, bounded).
    async fn check_position_not_ahead(&self, ns: &Namespace, cursor: &crate::fanout::Cursor) -> Result<(), crate::watch::WatchError> {
        use crate::watch::WatchError;
        for (partition, mark) in cursor.marks.iter() {
            let Some(handle) = ns.handles.get(partition as usize) else { continue };
            if mark.offset <= handle.applied_next() {
                continue;
            }
            let end = match tokio::time::timeout(LOG_END_WAIT, self.log.end_offset(&handle.tp)).await {
                Ok(Ok(end)) => end,
                Ok(Err(e)) => return Err(WatchError::Unavailable(format!("cannot check the position against the log: {e}"))),
                Err(_) => return Err(WatchError::Unavailable(format!("the log did not say where it ends within {LOG_END_WAIT:?}"))),
            };
            if mark.offset > end {
                return Err(WatchError::InvalidPosition(format!(
                    "the position is at offset {} of partition {partition}, beyond the log's end ({end}): it is not a \
                     position of this log (another cluster's, or a log since lost); resume with from=now or from=snapshot",
                    mark.offset
                )));
            }
        }
        Ok(())
    }
}
