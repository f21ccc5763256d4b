//! etcd 3 as a peer: serializable gets (answered from the member's local
//! state, like a Tern `local` read) over gRPC with the `etcd-client` crate,
//! one client (connection) per simulated client, same key set and value size.

use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};

use super::load::{key_name, value_of, LoadSpec};
use super::report::BenchResult;

pub(crate) async fn preload(endpoint: &str, keys: u64, value_bytes: usize) -> anyhow::Result<()> {
    let mut client = Client::connect([endpoint], None).await?;
    let value = value_of(value_bytes);
    for key in 0..keys {
        client.put(key_name(key), value.to_vec(), None).await?;
    }
    Ok(())
}

pub(crate) async fn run_gets(endpoint: &str, spec: &LoadSpec) -> anyhow::Result<BenchResult> {
    let start = Instant::now() + Duration::from_millis(500);
    let mut tasks = Vec::new();
    for _ in 0..spec.connections {
        let (endpoint, spec) = (endpoint.to_string(), spec.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect([endpoint], None).await?;
            let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut errors = 0u64;
            let mut rng = rand::rngs::SmallRng::from_os_rng();
            let measure_from = start + spec.warmup;
            let end = measure_from + spec.duration;
            tokio::time::sleep_until(start.into()).await;
            while Instant::now() < end {
                let key = key_name(rng.random_range(0..spec.keys));
                let sent = Instant::now();
                let ok = client.get(key, Some(GetOptions::new().with_serializable())).await.is_ok();
                let done = Instant::now();
                if sent >= measure_from && done <= end {
                    if ok {
                        histogram.saturating_record((done - sent).as_micros() as u64);
                    } else {
                        errors += 1;
                    }
                }
            }
            Ok::<_, anyhow::Error>((histogram, errors))
        }));
    }
    let mut merged = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut errors = 0;
    for task in tasks {
        let (h, e) = task.await??;
        merged.add(&h)?;
        errors += e;
    }
    Ok(BenchResult::from_histogram(&spec.name, spec.connections, "closed".into(), spec.duration.as_secs_f64(), errors, &merged))
}
