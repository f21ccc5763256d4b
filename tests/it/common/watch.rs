//! A small Server-Sent Events client for tests, and the model of what a
//! subscriber should have received (built from the writers' acknowledgements).
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is JSON ({e}): {:?}", self.data))
    }
}

pub(crate) struct Sse {
    response: reqwest::Response,
    buf: Vec<u8>,
    pending: VecDeque<SseEvent>,
}

impl Sse {
    /// Opens `url` (a watch URL); `last_event_id` as a browser would send it.
    pub(crate) async fn connect(client: &reqwest::Client, url: &str, last_event_id: Option<&str>) -> Sse {
        let mut request = client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("watch request");
        assert_eq!(response.status().as_u16(), 200, "watch {url}: {:?}", response.text().await);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Sse { response, buf: Vec::new(), pending: VecDeque::new() }
    }

    /// The next event, `None` if none came within `wait` or the stream ended.
    pub(crate) async fn next(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await.ok()?.ok()??;
            self.buf.extend_from_slice(&chunk);
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block[..end]) {
                    self.pending.push_back(event);
                }
            }
        }
    }

    /// The next event that is not a keep-alive or progress.
    /// The next event that is a change, waiting at most `wait` in all:
    /// keep-alives and progress events do not restart the wait (they come
    /// every few seconds, so a stalled watch would otherwise be waited on
    /// forever).
    pub(crate) async fn next_change(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return None;
            }
            let event = self.next(remaining).await?;
            if event.event != "keep-alive" && event.event != "progress" {
                return Some(event);
            }
        }
    }
}

fn parse_block(block: &[u8]) -> Option<SseEvent> {
    let text = std::str::from_utf8(block).expect("SSE is UTF-8");
    let (mut event, mut id, mut data) = (None, None, None);
    for line in text.split('\n') {
        if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("data: ") {
            assert!(data.is_none(), "one data line per event: {text:?}");
            data = Some(v.to_string());
        } else {
            assert!(line.starts_with("retry: "), "unexpected SSE line {line:?}");
        }
    }
    Some(SseEvent { event: event?, id, data: data.expect("every event has data") })
}

/// One change as a subscriber sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub kind: String,
    pub pk: String,
    pub sk: String,
    pub value: Value,
    pub version: u64,
}

impl Change {
    pub(crate) fn from_event(event: &SseEvent) -> Change {
        let v = event.json();
        Change {
            kind: event.event.clone(),
            pk: v["pk"].as_str().unwrap().to_string(),
            sk: v["sk"].as_str().unwrap().to_string(),
            value: v["value"].clone(),
            version: v["version"].as_u64().unwrap(),
        }
    }
}

/// What the writers know was applied: per partition, in log order.
#[derive(Default, Debug)]
pub(crate) struct Truth {
    pub by_partition: BTreeMap<u32, BTreeMap<u64, Vec<Change>>>,
}

impl Truth {
    pub(crate) fn record(&mut self, partition: u32, version: u64, changes: Vec<Change>) {
        assert!(self.by_partition.entry(partition).or_default().insert(version, changes).is_none(), "one mutation per offset");
    }

    /// Every change `watches` selects, per partition, in log order.
    pub(crate) fn expected(&self, watches: impl Fn(&str, &str) -> bool) -> BTreeMap<u32, Vec<Change>> {
        self.by_partition
            .iter()
            .map(|(p, mutations)| (*p, mutations.values().flatten().filter(|c| watches(&c.pk, &c.sk)).cloned().collect::<Vec<_>>()))
            .filter(|(_, changes)| !changes.is_empty())
            .collect()
    }

    /// The next offset of each partition (the position after every write).
    pub(crate) fn end(&self, partitions: u32) -> BTreeMap<u32, u64> {
        (0..partitions).map(|p| (p, self.by_partition.get(&p).and_then(|m| m.keys().last()).map_or(0, |v| v + 1))).collect()
    }

    /// The state after every write: (pk, sk) -> value.
    pub(crate) fn state(&self) -> BTreeMap<(String, String), Value> {
        let mut state = BTreeMap::new();
        for mutations in self.by_partition.values() {
            for change in mutations.values().flatten() {
                let key = (change.pk.clone(), change.sk.clone());
                if change.kind == "delete" {
                    state.remove(&key);
                } else {
                    state.insert(key, change.value.clone());
                }
            }
        }
        state
    }
}

/// `ns:p:o,...` → partition → offset (ignores marks inside a mutation).
pub(crate) fn offsets_of(position: &str) -> BTreeMap<u32, u64> {
    let (_, rest) = position.split_once(':').unwrap();
    rest.split(',')
        .map(|part| {
            let (p, o) = part.split_once(':').unwrap();
            let offset = o.split('.').next().unwrap();
            (p.parse().unwrap(), offset.parse().unwrap())
        })
        .collect()
}
