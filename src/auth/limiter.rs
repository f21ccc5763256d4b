//! Failed authentications, rate-limited per source address: each address
//! has a bucket of `burst` failures that refills at `burst` per minute;
//! while its bucket is empty, its requests that need authentication are
//! answered 429 `too_many_failed_authentications` without being looked at.
//! The table is bounded (`SOURCES_MAX`): a new address in a full table
//! evicts the one whose last failure is oldest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most source addresses remembered.
pub const SOURCES_MAX: usize = 10_000;
/// The refill period: `burst` failures per this.
const REFILL_PERIOD: Duration = Duration::from_secs(60);

pub struct FailureLimiter {
    burst: u32,
    sources: Mutex<HashMap<IpAddr, Bucket>>,
    /// Since `created`, when the last failure of anyone was, in µs (0: none
    /// yet): a refill period after it every bucket is full, so the check
    /// needs no lock (the common case: every request checks).
    last_failure_us: AtomicU64,
    created: Instant,
}

#[derive(Clone, Copy)]
struct Bucket {
    /// Failures still allowed, as of `at`.
    tokens: f64,
    at: Instant,
}

impl FailureLimiter {
    /// `burst` failures per minute per address (0: no limit).
    pub fn new(burst: u32) -> FailureLimiter {
        FailureLimiter { burst, sources: Mutex::new(HashMap::new()), last_failure_us: AtomicU64::new(0), created: Instant::now() }
    }

    /// How long `source` must wait, when it is over its limit.
    pub fn blocked_for(&self, source: IpAddr, now: Instant) -> Option<Duration> {
        if self.burst == 0 {
            return None;
        }
        let last_failure_us = self.last_failure_us.load(Ordering::Relaxed);
        let now_us = now.saturating_duration_since(self.created).as_micros() as u64;
        if last_failure_us == 0 || now_us.saturating_sub(last_failure_us) > REFILL_PERIOD.as_micros() as u64 {
            return None;
        }
        let sources = self.sources.lock();
        let bucket = self.refilled(*sources.get(&source)?, now);
        (bucket.tokens < 1.0).then(|| self.refill_time(1.0 - bucket.tokens))
    }

    /// Records a failed authentication from `source`.
    pub fn failed(&self, source: IpAddr, now: Instant) {
        if self.burst == 0 {
            return;
        }
        let now_us = (now.saturating_duration_since(self.created).as_micros() as u64).max(1);
        self.last_failure_us.fetch_max(now_us, Ordering::Relaxed);
        let mut sources = self.sources.lock();
        if !sources.contains_key(&source) && sources.len() >= SOURCES_MAX {
            let oldest = sources.iter().min_by_key(|(_, b)| b.at).map(|(ip, _)| *ip).expect("the table is full");
            sources.remove(&oldest);
        }
        let full = Bucket { tokens: f64::from(self.burst), at: now };
        let bucket = sources.get(&source).map_or(full, |b| self.refilled(*b, now));
        sources.insert(source, Bucket { tokens: (bucket.tokens - 1.0).max(0.0), at: now });
        assert!(sources.len() <= SOURCES_MAX);
    }

    pub fn sources(&self) -> usize {
        self.sources.lock().len()
    }

    fn refilled(&self, bucket: Bucket, now: Instant) -> Bucket {
        let rate_per_s = f64::from(self.burst) / REFILL_PERIOD.as_secs_f64();
        let elapsed_s = now.saturating_duration_since(bucket.at).as_secs_f64();
        Bucket { tokens: (bucket.tokens + elapsed_s * rate_per_s).min(f64::from(self.burst)), at: now }
    }

    fn refill_time(&self, tokens: f64) -> Duration {
        let rate_per_s = f64::from(self.burst) / REFILL_PERIOD.as_secs_f64();
        Duration::from_secs_f64((tokens / rate_per_s).max(0.001))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_blocked_after_its_burst_and_recovers() {
        let limiter = FailureLimiter::new(3);
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let other: IpAddr = "::1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.blocked_for(ip, t0).is_none());
            limiter.failed(ip, t0);
        }
        let wait = limiter.blocked_for(ip, t0).expect("blocked after 3 failures");
        assert!(wait <= Duration::from_secs(20), "{wait:?}");
        assert!(limiter.blocked_for(other, t0).is_none(), "another source is not");
        assert!(limiter.blocked_for(ip, t0 + Duration::from_secs(21)).is_none(), "one failure refills in 20 s");
    }

    #[test]
    fn the_table_is_bounded() {
        let limiter = FailureLimiter::new(1);
        let t0 = Instant::now();
        for i in 0..(SOURCES_MAX as u32 + 10) {
            limiter.failed(IpAddr::from(i.to_be_bytes()), t0 + Duration::from_micros(u64::from(i)));
        }
        assert_eq!(limiter.sources(), SOURCES_MAX);
        assert!(limiter.blocked_for(IpAddr::from(0u32.to_be_bytes()), t0).is_none(), "the oldest was evicted");
    }

    #[test]
    fn zero_means_no_limit() {
        let limiter = FailureLimiter::new(0);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..100 {
            limiter.failed(ip, Instant::now());
        }
        assert!(limiter.blocked_for(ip, Instant::now()).is_none());
        assert_eq!(limiter.sources(), 0);
    }
}
