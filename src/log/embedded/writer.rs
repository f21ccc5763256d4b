//! Group commit: the one thread that writes the embedded log.
//!
//! Appenders send requests over a bounded queue. The writer takes the first
//! request, then everything already queued (up to `BATCH_REQUESTS_MAX` /
//! `BATCH_BYTES_MAX`), assigns offsets, writes all frames with one `write`,
//! and makes them durable with one `fdatasync`. Only then does it acknowledge the
//! new durable end offsets and answer every appender: many concurrent writers
//! share one fsync, and no reader ever sees an entry that is not durable.

use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::frame;
use super::index::PartitionState;
use super::segments::Segments;
use crate::log::LogError;
use crate::metrics;

/// Most appends made durable by one fsync.
pub(super) const BATCH_REQUESTS_MAX: usize = 4096;
/// Most bytes written per group commit.
pub(super) const BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

pub(super) struct AppendRequest {
    pub partition: Arc<PartitionState>,
    pub payload: Bytes,
    pub reply: oneshot::Sender<Result<u64, LogError>>,
}

pub(super) struct Writer {
    pub segments: Arc<Segments>,
    pub active: File,
    pub active_id: u64,
    pub active_bytes: u64,
    pub segment_bytes_max: u64,
    /// Set after a failed write or fsync: the on-disk state is unknown, so
    /// every later append fails until the node restarts and recovers.
    pub failed: Option<String>,
}

struct Pending {
    partition: Arc<PartitionState>,
    offset: u64,
    position: u32,
    payload: Bytes,
    reply: oneshot::Sender<Result<u64, LogError>>,
}

impl Writer {
    /// Runs until every sender is gone and the queue is drained.
    pub(super) fn run(mut self, mut queue: mpsc::Receiver<AppendRequest>) {
        let mut buf = Vec::with_capacity(1024 * 1024);
        while let Some(first) = queue.blocking_recv() {
            let mut batch = vec![first];
            let mut batch_bytes = batch[0].payload.len();
            while batch.len() < BATCH_REQUESTS_MAX && batch_bytes < BATCH_BYTES_MAX {
                match queue.try_recv() {
                    Ok(request) => {
                        batch_bytes += request.payload.len();
                        batch.push(request);
                    }
                    Err(_) => break,
                }
            }
            self.commit(batch, &mut buf);
        }
        if let Err(e) = self.active.sync_data() {
            tracing::error!(error = %e, "final fsync of the embedded log failed");
        }
    }

    fn commit(&mut self, batch: Vec<AppendRequest>, buf: &mut Vec<u8>) {
        if let Some(reason) = &self.failed {
            for request in batch {
                let _ = request.reply.send(Err(LogError::Unavailable(reason.clone())));
            }
            return;
        }
        if self.active_bytes >= self.segment_bytes_max {
            if let Err(e) = self.roll() {
                self.fail(format!("cannot start a new segment: {e}"));
                return self.commit(batch, buf);
            }
        }
        buf.clear();
        let started = Instant::now();
        let pending = self.frame_batch(batch, buf);
        let result = self.active.write_all(buf).and_then(|()| self.active.sync_data());
        metrics::LOG_FSYNC_BATCH_ENTRIES.observe(pending.len() as f64);
        metrics::LOG_FSYNC_SECONDS.observe(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                self.active_bytes += buf.len() as u64;
                self.acknowledge(pending);
            }
            Err(e) => {
                let reason = format!("write or fsync of segment {} failed: {e}", self.active_id);
                self.fail(reason.clone());
                // Written but perhaps not durable: a frame may survive the
                // restart's torn-tail check. Later appends are refused
                // before writing (`failed`): those are never in the log.
                for p in pending {
                    let _ = p.reply.send(Err(LogError::Ambiguous(reason.clone())));
                }
            }
        }
    }

    /// Assigns offsets and encodes frames; nothing is visible yet.
    fn frame_batch(&mut self, batch: Vec<AppendRequest>, buf: &mut Vec<u8>) -> Vec<Pending> {
        let mut pending = Vec::with_capacity(batch.len());
        for request in batch {
            let offset = {
                let mut index = request.partition.index.lock();
                let offset = index.next_offset;
                index.next_offset += 1;
                offset
            };
            let position = self.active_bytes + buf.len() as u64;
            assert!(position <= u64::from(u32::MAX), "segments stay below 4 GiB");
            frame::encode_into(buf, request.partition.topic_id, request.partition.partition, offset, &request.payload);
            pending.push(Pending { partition: request.partition, offset, position: position as u32, payload: request.payload, reply: request.reply });
        }
        pending
    }

    /// Makes durable entries visible: index, tail cache, end offset, reply.
    fn acknowledge(&mut self, pending: Vec<Pending>) {
        for p in pending {
            {
                let mut index = p.partition.index.lock();
                index.record_position(self.active_id, p.offset, p.position);
                index.push_tail(p.offset, p.payload);
            }
            p.partition.durable_end.send_modify(|end| {
                assert_eq!(*end, p.offset, "entries of a partition become durable in offset order");
                *end = p.offset + 1;
            });
            let _ = p.reply.send(Ok(p.offset));
        }
    }

    fn roll(&mut self) -> std::io::Result<()> {
        self.active.sync_data()?;
        let (id, file) = self.segments.create_next()?;
        self.active = file;
        self.active_id = id;
        self.active_bytes = 0;
        Ok(())
    }

    fn fail(&mut self, reason: String) {
        tracing::error!(%reason, "embedded log failed; appends are refused until restart");
        self.failed = Some(reason);
    }
}
