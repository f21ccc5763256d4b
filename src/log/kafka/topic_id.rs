//! A Kafka topic's id (KIP-516: a UUID the controller gives a topic when it
//! is created; a topic deleted and re-created under the same name gets a new
//! one). The `rdkafka` crate does not wrap `DescribeTopics`, so this calls
//! librdkafka's admin API directly, on a queue of its own, bounded by a
//! timeout. Tern names its snapshots' log with it (`Log::identity`).

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;

/// The topic id of `topic` (base64, as Kafka's tools print it), asked of the
/// cluster through the client `rk`. Blocking: call it from a blocking task.
///
/// # Safety
/// `rk` must be a live librdkafka handle for the whole call.
pub(super) unsafe fn describe(rk: *mut rd::rd_kafka_t, topic: &str, timeout: Duration) -> Result<String, String> {
    let name = CString::new(topic).map_err(|_| format!("topic name {topic:?} contains a NUL byte"))?;
    let mut names = [name.as_ptr()];
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // Each resource is destroyed by its guard, on every path out.
    let queue = Guard(rd::rd_kafka_queue_new(rk), |q| rd::rd_kafka_queue_destroy(q));
    let topics = Guard(rd::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1), |t| rd::rd_kafka_TopicCollection_destroy(t));
    let options =
        Guard(rd::rd_kafka_AdminOptions_new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS), |o| rd::rd_kafka_AdminOptions_destroy(o));
    let mut errstr = [0 as std::ffi::c_char; 256];
    rd::rd_kafka_AdminOptions_set_request_timeout(options.0, timeout_ms, errstr.as_mut_ptr(), errstr.len());
    rd::rd_kafka_DescribeTopics(rk, topics.0, options.0, queue.0);
    // The answer, or the request's own timeout error, comes within the timeout; the slack covers scheduling.
    let event = Guard(rd::rd_kafka_queue_poll(queue.0, timeout_ms.saturating_add(1000)), |e| rd::rd_kafka_event_destroy(e));
    if event.0.is_null() {
        return Err(format!("describing topic {topic}: no answer within {timeout:?}"));
    }
    if rd::rd_kafka_event_error(event.0) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(format!("describing topic {topic}: {}", text(rd::rd_kafka_event_error_string(event.0))));
    }
    let result = rd::rd_kafka_event_DescribeTopics_result(event.0);
    if result.is_null() {
        return Err(format!("describing topic {topic}: not a DescribeTopics result"));
    }
    let mut count = 0usize;
    let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
    if count != 1 || descriptions.is_null() {
        return Err(format!("describing topic {topic}: {count} descriptions returned"));
    }
    let description = *descriptions;
    let error = rd::rd_kafka_TopicDescription_error(description);
    if !error.is_null() {
        return Err(format!("describing topic {topic}: {}", text(rd::rd_kafka_error_string(error))));
    }
    let id = rd::rd_kafka_TopicDescription_topic_id(description);
    if id.is_null() {
        return Err(format!("describing topic {topic}: the broker gave no topic id"));
    }
    Ok(text(rd::rd_kafka_Uuid_base64str(id)))
}

struct Guard<T>(*mut T, unsafe fn(*mut T));

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by the matching librdkafka constructor, destroyed once.
            unsafe { (self.1)(self.0) }
        }
    }
}

/// # Safety
/// `ptr` is null or a NUL-terminated string that lives for the call.
unsafe fn text(ptr: *const std::ffi::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    CStr::from_ptr(ptr).to_string_lossy().into_owned()
}
