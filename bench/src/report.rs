//! Benchmark results: one `BenchResult` per measured load, with HdrHistogram
//! percentiles, rendered as JSON and as a Markdown table.

use hdrhistogram::Histogram;
use serde::Serialize;

/// A ratio as reports give it: three decimals.
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct BenchResult {
    pub name: String,
    pub connections: usize,
    /// "closed" or "open@<rate>/s".
    pub mode: String,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub throughput_per_s: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl BenchResult {
    pub(crate) fn from_histogram(name: &str, connections: usize, mode: String, seconds: f64, errors: u64, h: &Histogram<u64>) -> Self {
        BenchResult {
            name: name.to_string(),
            connections,
            mode,
            seconds,
            requests: h.len(),
            errors,
            throughput_per_s: h.len() as f64 / seconds,
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

pub(crate) fn markdown(results: &[BenchResult]) -> String {
    let mut out = String::from(
        "| benchmark | conns | mode | req/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | errors |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in results {
        out.push_str(&format!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
            r.name, r.connections, r.mode, r.throughput_per_s, r.p50_us, r.p90_us, r.p99_us, r.p999_us, r.max_us, r.errors
        ));
    }
    out
}
