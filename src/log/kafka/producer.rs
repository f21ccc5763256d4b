//! The producer, and what became of a write it could not deliver.
//!
//! rdkafka's `FutureProducer` answers a failed send with the error alone;
//! but "failed" is two very different things to a database: librdkafka
//! knows whether the record was never sent (`NOT_PERSISTED`: no broker
//! saw it, it never will) or may be in the log (`POSSIBLY_PERSISTED`: a
//! request was in flight when it gave up). Ripcord may journal the first
//! (a journaled copy is then the only copy) but never the second: a copy
//! of a write that did land would be a second write, applied after writes
//! acknowledged since (issue 36, defect 2). So this producer keeps
//! librdkafka's message status (`rd_kafka_message_status`) with each
//! delivery report.
//!
//! An idempotent producer can fail for good (librdkafka's fatal errors:
//! the broker lost the producer's state or sequence, e.g. a broker
//! restarted without its last writes): every later send would fail at
//! once, and the node's writes would stop with nothing to heal them
//! (issue 36: a CI run's sequencer appended nothing for minutes after its
//! broker came back). So a send that finds its producer failed makes a new
//! one from the same configuration (a new producer id, so new sequences),
//! at most once per `REMAKE_INTERVAL_MIN`. Sends the failed producer held
//! are reported failed with their message status, as any other failure.
//!
//! Bounds: librdkafka's own queue (`queue.buffering.max.*`); a send waits
//! at most `queue_wait` for room in it, then fails as never sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use tokio::sync::oneshot;

/// How often a send retries while librdkafka's queue is full.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(20);
/// A failed producer is made again at most this often (making one that
/// cannot start must not spin).
const REMAKE_INTERVAL_MIN: Duration = Duration::from_secs(1);

/// Whether a record a send failed on may be in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Persisted {
    /// Never sent, or refused by the broker before it appended: not in the
    /// log, and never will be.
    No,
    /// In flight when librdkafka gave up: it may be in the log.
    Possibly,
    /// In the log, though the send reported an error.
    Yes,
}

/// A failed send: librdkafka's error, and whether the record may be in the log.
#[derive(Debug)]
pub(super) struct SendFailed {
    pub(super) error: KafkaError,
    pub(super) persisted: Persisted,
}

/// A delivery report: the offset, or why not.
type Report = Result<i64, SendFailed>;

/// The producer's context: answers each send's oneshot with its report.
#[derive(Clone, Default)]
pub(super) struct ReportingContext;

impl ClientContext for ReportingContext {}

impl ProducerContext for ReportingContext {
    type DeliveryOpaque = Box<oneshot::Sender<Report>>;

    fn delivery(&self, result: &DeliveryResult<'_>, reply: Self::DeliveryOpaque) {
        let report = match result {
            Ok(message) => Ok(message.offset()),
            Err((error, message)) => {
                // SAFETY: the message is librdkafka's, alive for this callback.
                let status = unsafe { rdkafka::bindings::rd_kafka_message_status(message.ptr()) };
                let persisted = match status {
                    rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED => Persisted::No,
                    rdkafka::bindings::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_PERSISTED => Persisted::Yes,
                    _ => Persisted::Possibly,
                };
                Err(SendFailed { error: error.clone(), persisted })
            }
        };
        // The sender may have stopped waiting (its request was dropped).
        let _ = reply.send(report);
    }
}

/// librdkafka's producer with a polling thread of its own, reporting each
/// delivery with its message status; made again after a fatal error.
pub(super) struct ReportingProducer {
    inner: RwLock<Arc<ThreadedProducer<ReportingContext>>>,
    config: ClientConfig,
    /// When the producer was last made again.
    remade_at: Mutex<Option<Instant>>,
}

impl ReportingProducer {
    pub(super) fn create(config: &ClientConfig) -> KafkaResult<ReportingProducer> {
        let inner = config.create_with_context(ReportingContext)?;
        Ok(ReportingProducer { inner: RwLock::new(Arc::new(inner)), config: config.clone(), remade_at: Mutex::new(None) })
    }

    /// The producer to send with: a new one if the current one failed for good.
    fn current(&self) -> Arc<ThreadedProducer<ReportingContext>> {
        let producer = self.inner.read().clone();
        let Some((code, reason)) = producer.client().fatal_error() else { return producer };
        let mut remade_at = self.remade_at.lock();
        // Another send made it again meanwhile.
        let now = self.inner.read().clone();
        if !Arc::ptr_eq(&now, &producer) {
            return now;
        }
        if remade_at.is_some_and(|at| at.elapsed() < REMAKE_INTERVAL_MIN) {
            return producer;
        }
        *remade_at = Some(Instant::now());
        match self.config.create_with_context::<_, ThreadedProducer<ReportingContext>>(ReportingContext) {
            Ok(made) => {
                tracing::error!(?code, %reason, "the Kafka producer failed for good; made a new one (sends it held are reported failed)");
                crate::metrics::KAFKA_PRODUCER_REMADE.inc();
                let made = Arc::new(made);
                let old = std::mem::replace(&mut *self.inner.write(), made.clone());
                // Dropping a producer purges, flushes and joins its thread:
                // not on a runtime worker (sends still holding it drop theirs).
                drop(producer);
                tokio::task::spawn_blocking(move || drop(old));
                made
            }
            Err(e) => {
                tracing::error!(?code, %reason, error = %e, "the Kafka producer failed for good and a new one could not be made; trying again");
                producer
            }
        }
    }

    /// Runs `look` on the client of the producer sends go to now (for
    /// `rebootstrap.rs`), under the lock: a clone could be the last handle,
    /// and closing a client blocks.
    pub(super) fn with_client<R>(&self, look: impl FnOnce(&rdkafka::client::Client<ReportingContext>) -> R) -> R {
        look(self.inner.read().client())
    }

    /// Makes the current producer fail for good, as the broker can: for
    /// tests of what follows (librdkafka's `rd_kafka_test_fatal_error`,
    /// "there is no practical way to trigger real fatal errors").
    #[doc(hidden)]
    pub(super) fn fail_for_test(&self) {
        let producer = self.inner.read().clone();
        let reason = std::ffi::CString::new("made to fail by a test").expect("no NUL");
        // SAFETY: the handle is alive (held above); librdkafka copies the reason.
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            );
        }
    }

    /// Sends `payload` to `topic`/`partition` with `headers`; waits for its
    /// delivery report. A send librdkafka's queue had no room for within
    /// `queue_wait` was never sent.
    pub(super) async fn send(
        &self,
        topic: &str,
        partition: i32,
        payload: &[u8],
        headers: Option<rdkafka::message::OwnedHeaders>,
        queue_wait: Duration,
    ) -> Report {
        let started = Instant::now();
        let (reply, report) = oneshot::channel();
        let mut record: BaseRecord<'_, [u8], [u8], Box<oneshot::Sender<Report>>> =
            BaseRecord::with_opaque_to(topic, Box::new(reply)).partition(partition).payload(payload);
        if let Some(headers) = headers {
            record = record.headers(headers);
        }
        let producer = self.current();
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if started.elapsed() < queue_wait => {
                    record = back;
                    tokio::time::sleep(QUEUE_FULL_RETRY).await;
                }
                // Refused before it was queued: never sent.
                Err((error, _)) => return Err(SendFailed { error, persisted: Persisted::No }),
            }
        }
        match report.await {
            Ok(report) => report,
            // The producer dropped the report unsent (torn down with the
            // record queued or in flight): it may have been sent.
            Err(_) => Err(SendFailed { error: KafkaError::Canceled, persisted: Persisted::Possibly }),
        }
    }

    /// Waits (at most `timeout`) for every queued record to be delivered or fail.
    pub(super) fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        let producer = self.inner.read().clone();
        producer.flush(timeout)
    }
}
