//! Running a node: open the log and node, serve the API, and on SIGTERM or
//! Ctrl-C stop accepting, finish in-flight requests, stop the apply loops
//! (each flushes its store) and close the log.

use std::sync::Arc;
use std::time::Duration;

use crate::auth::key_refresh;
use crate::cluster::{Cluster, GossipConfig, PeerClient, SelfInfo};
use crate::edge::{Access, AppState};
use crate::firebase::FirebaseConfig;
use crate::http::Protocols;
use crate::log::embedded::EmbeddedLog;
use crate::log::kafka::KafkaLog;
use crate::log::Log;
use crate::node::snapshots as schedule;
use crate::node::Node;
use crate::settings::Settings;
use crate::snapshot::Snapshots;

/// Runs a node with `settings` until SIGTERM or Ctrl-C; `banner` is printed
/// with the URL once it serves (the test harness and scripts wait for it).
pub(crate) async fn run(settings: Settings, banner: &'static str) -> anyhow::Result<()> {
    settings.validate()?;
    crate::metrics::register_every_family();
    let auth = settings.auth_config()?;
    let tls = tls_config(&settings).map(crate::http::tls::Tls::load).transpose()?.map(Arc::new);
    let authenticator = auth.as_ref().map(crate::auth::Authenticator::new).transpose()?.map(Arc::new);
    let ensure_namespaces = settings.namespaces_to_create()?;
    let snapshots = match &settings.snapshots {
        Some(url) => {
            let options: Vec<(String, String)> = settings.snapshot_options.clone().into_iter().collect();
            Some(Snapshots::open_with(url, &options).map_err(|e| anyhow::anyhow!("snapshots at {url}: {e}"))?)
        }
        None => None,
    };
    let (log, embedded, kafka) = open_log(&settings).await?;
    let node = Node::start(settings.node_config(snapshots.clone()), log).await?;
    let restored = match (&snapshots, settings.restore) {
        (Some(snapshots), true) => recreate_snapshotted_namespaces(&node, snapshots, &settings.kafka_topic_prefix).await?,
        _ => Vec::new(),
    };
    for (name, partitions) in &ensure_namespaces {
        match restored.iter().find(|(n, _)| n == name) {
            // Restored as it was snapshotted: its count is the snapshots'.
            Some((_, had)) if had != partitions => {
                say(&format!("namespace {name} was restored with the {had} partitions it had, not {partitions}"));
            }
            Some(_) => {}
            None => {
                node.create_namespace(name, *partitions).await?;
            }
        }
    }
    if let (Some(kafka), true) = (&kafka, snapshots.is_some()) {
        check_kafka_retention(kafka, &node, Duration::from_millis(settings.snapshot_interval_ms)).await;
    }
    if settings.restore {
        tokio::spawn(report_restore(Arc::downgrade(&node), std::time::Instant::now()));
    }
    let mut tasks = Tasks::new();
    if let Some(embedded) = embedded {
        let interval = Duration::from_millis(settings.log_retention_check_ms);
        tasks.spawn("log retention", enforce_retention_forever(embedded, Arc::downgrade(&node), snapshots.clone(), interval));
    }
    if let (Some(snapshots), true) = (&snapshots, settings.snapshot_writer) {
        let (node, snapshots, policy) = (Arc::downgrade(&node), snapshots.clone(), settings.snapshot_policy());
        // Graceful: a snapshot being taken is finished first.
        tasks.spawn_graceful("snapshot schedule", move |stopping| schedule::run(node, snapshots, policy, stopping));
    }
    let listener = tokio::net::TcpListener::bind(&settings.listen).await.map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", settings.listen))?;
    let address = listener.local_addr()?;
    let client = peer_client(&settings, auth.as_ref().and_then(|a| a.root_token.clone()))?;
    let cluster = join_cluster(&settings, &node, address, client).await?;
    let access = Access {
        authenticator: authenticator.clone(),
        root_token: auth.as_ref().and_then(|a| a.root_token.clone()),
        public_metrics: settings.public_metrics,
        public_health: settings.public_health,
    };
    let app = AppState { node: node.clone(), cluster: cluster.clone(), access: Arc::new(access) };
    let firebase = FirebaseConfig::new(settings.firebase_owner_token.clone(), settings.firebase_emulator);
    let protocols = Protocols { cors_origins: settings.cors_origins()?, ..Protocols::new(app, firebase) };
    // onDisconnect writes whose connection's node restarted or died.
    tasks.spawn("onDisconnect sweeper", protocols.firebase.clone().sweep_forever());
    // Round trips to the peers, for routing to the nearest holder.
    if settings.gossip.is_some() {
        tasks.spawn("round-trip probes", crate::cluster::probe::probe_forever(cluster.clone()));
    }
    if let Some(authenticator) = authenticator {
        key_refresh::open_system_namespace(&node).await?;
        tasks.spawn("API key refresh", key_refresh::refresh_forever(authenticator, node.clone(), cluster.clone()));
    }
    if let Some(tls) = &tls {
        tasks.spawn("TLS certificate reload", tls.clone().reload_forever());
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    say(&format!("{banner} listening on {scheme}://{address}"));
    say(&format!("console: {scheme}://{address}/console"));
    say_who_may_connect(&settings, address);
    tracing::info!(%address, node_id = %settings.node_id, data_dir = %settings.data_dir.display(), "serving");
    let service = crate::http::service(protocols.clone());
    let closing_node = node.clone();
    let closing_firebase = protocols.firebase.clone();
    let signal = async move {
        shutdown_signal().await;
        // Realtime connections first: each makes its onDisconnect writes
        // as it closes (what it cannot, the next start's sweeper makes).
        closing_firebase.close_connections();
        // Watches never end by themselves: end them, so graceful
        // shutdown is not kept waiting by their connections.
        closing_node.watches.close();
    };
    let limits = crate::http::ConnectionLimits { idle: Duration::from_millis(settings.http_idle_ms), connections_max: settings.http_connections_max };
    crate::http::serve(listener, protocols, service, limits, tls, signal).await;
    tracing::info!("stopped accepting requests; stopping the node");
    tasks.stop().await;
    cluster.shutdown().await;
    node.shutdown().await;
    Ok(())
}

/// Bound on stopping the background tasks (a snapshot being taken is
/// finished within it, or abandoned: a snapshot is all or nothing).
const TASKS_STOP_WAIT: Duration = Duration::from_secs(30);

/// The process's background tasks: each started through `spawn` (or
/// `spawn_graceful`), all stopped through `stop`, the one shutdown path.
struct Tasks {
    stop: tokio::sync::watch::Sender<bool>,
    running: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl Tasks {
    fn new() -> Tasks {
        Tasks { stop: tokio::sync::watch::Sender::new(false), running: Vec::new() }
    }

    /// Runs `task` (a loop that never ends by itself) until `stop`: it is
    /// dropped at its next await.
    fn spawn(&mut self, name: &'static str, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut stopped = self.stop.subscribe();
        let handle = tokio::spawn(async move {
            tokio::select! {
                () = task => tracing::warn!(task = name, "a background task ended by itself"),
                _ = stopped.wait_for(|stop| *stop) => {}
            }
        });
        self.running.push((name, handle));
    }

    /// Runs `task(stopping)`, which ends by itself once `stopping` is true
    /// (after finishing what it is doing).
    fn spawn_graceful<F, T>(&mut self, name: &'static str, task: F)
    where
        F: FnOnce(tokio::sync::watch::Receiver<bool>) -> T,
        T: std::future::Future<Output = ()> + Send + 'static,
    {
        self.running.push((name, tokio::spawn(task(self.stop.subscribe()))));
    }

    /// Tells every task to stop and waits for them, `TASKS_STOP_WAIT` in
    /// all; the ones still running then are aborted, and said.
    async fn stop(self) {
        self.stop.send_replace(true);
        let deadline = tokio::time::Instant::now() + TASKS_STOP_WAIT;
        for (name, mut handle) in self.running {
            if tokio::time::timeout_at(deadline, &mut handle).await.is_err() {
                tracing::warn!(task = name, wait_s = TASKS_STOP_WAIT.as_secs(), "a background task did not stop in time; aborted");
                handle.abort();
            }
        }
    }
}

/// Every `interval`, lets the embedded log delete what every partition's
/// oldest retained snapshot and store have moved past.
async fn enforce_retention_forever(embedded: EmbeddedLog, node: std::sync::Weak<Node>, snapshots: Option<Snapshots>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        if let (Some(snapshots), Some(node)) = (&snapshots, node.upgrade()) {
            set_snapshot_floors(&embedded, &node, snapshots).await;
        }
        let log = embedded.clone();
        match tokio::task::spawn_blocking(move || log.enforce_retention()).await {
            Ok(Err(e)) => tracing::error!(error = %e, "log retention failed"),
            Err(e) => tracing::error!(error = %e, "log retention task failed"),
            Ok(Ok(_)) => {}
        }
    }
}

/// The listener's TLS, when `tls_cert_file` and `tls_key_file` are set.
fn tls_config(settings: &Settings) -> Option<crate::http::tls::TlsConfig> {
    Some(crate::http::tls::TlsConfig {
        cert_file: settings.tls_cert_file.clone()?,
        key_file: settings.tls_key_file.clone()?,
        client_ca_file: settings.tls_client_ca_file.clone(),
        reload_interval: Duration::from_millis(settings.tls_reload_ms),
    })
}

/// Writes a line to stdout, best effort: a reader that went away (a script
/// that read the banner, a supervisor without one) must not stop the node,
/// as `println!` would by panicking on the broken pipe.
fn say(line: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
}

/// Says at start whether requests need a token (never the token itself:
/// where it is).
fn say_who_may_connect(settings: &Settings, address: std::net::SocketAddr) {
    if settings.auth {
        let path = settings.admin_token_file.clone().unwrap_or_else(|| settings.data_dir.join("admin.token"));
        say(&format!("authentication on: every request needs Authorization: Bearer TOKEN; the admin token is in {}", path.display()));
    } else if address.ip().is_loopback() {
        say("authentication off: anyone on this machine can read and write everything (tern dev --auth turns it on)");
    } else {
        say(&format!("authentication off (--insecure): anyone who reaches {address} can read and write everything"));
        tracing::warn!(%address, "serving without authentication beyond loopback (--insecure)");
    }
}

/// `--restore` on a new log: every namespace the snapshot store holds that
/// this node does not have yet is created first (with the partition count
/// its manifests state), so each of its partitions is restored like
/// `default`'s, not left behind in the bucket. Each is said with the log
/// its snapshots were taken of. Not refused when they are of several logs:
/// an idle namespace keeps its snapshots of the log lost before the last
/// restore (its partitions never change, so no newer one is taken), and a
/// second restore must still bring it back. A namespace whose snapshots are
/// of a topic not its own (it read a Kafka source topic) is left, said.
/// Returns the namespaces it created, with their counts.
async fn recreate_snapshotted_namespaces(node: &Node, snapshots: &Snapshots, topic_prefix: &str) -> anyhow::Result<Vec<(String, u32)>> {
    let missing = snapshots
        .namespaces(|name| node.namespace(name).is_none())
        .await
        .map_err(|e| anyhow::anyhow!("--restore: listing the snapshot store's namespaces failed: {e}"))?;
    let mut created = Vec::new();
    for namespace in &missing {
        let (name, partitions) = (&namespace.name, namespace.partitions);
        if namespace.topic() != name.as_str() && namespace.topic() != format!("{topic_prefix}{name}") {
            say(&format!(
                "not restoring namespace {name}: its snapshots are of the topic {:?}, not its own (it read a source topic)",
                namespace.topic()
            ));
            continue;
        }
        // Each is said with its log: a store shared with another cluster shows here.
        say(&format!("restoring namespace {name} ({partitions} partitions) from its snapshots of {}", namespace.log_origin()));
        let made = match name.starts_with('_') {
            true => node.create_system_namespace(name, partitions).await,
            false => node.create_namespace(name, partitions).await,
        };
        made.map_err(|e| anyhow::anyhow!("--restore: re-creating namespace {name}: {e}"))?;
        created.push((name.clone(), partitions));
    }
    Ok(created)
}

/// How often `--restore` says how far it is.
const RESTORE_REPORT_INTERVAL: Duration = Duration::from_secs(2);
/// How long `--restore` reports at most; past it, `GET /v1/ns/{ns}` and
/// `/readyz` say which partitions are still catching up.
const RESTORE_REPORT_MAX: Duration = Duration::from_secs(3600);

/// `--restore`: says, every `RESTORE_REPORT_INTERVAL`, how many of the
/// partitions this node holds serve and how many were restored from
/// snapshots, then a summary once all serve (at most `RESTORE_REPORT_MAX`).
async fn report_restore(node: std::sync::Weak<Node>, started: std::time::Instant) {
    loop {
        tokio::time::sleep(RESTORE_REPORT_INTERVAL).await;
        let Some(node) = node.upgrade() else { return };
        let handles: Vec<_> = node.namespaces().iter().flat_map(|ns| ns.handles.clone()).filter(|h| h.is_held()).collect();
        let serving = handles.iter().filter(|h| h.status() == crate::partition::PartitionStatus::Serving).count();
        // A refused partition is done too, and named: the case an operator must see.
        let refused: Vec<String> =
            handles.iter().filter(|h| matches!(h.status(), crate::partition::PartitionStatus::Refused(_))).map(|h| h.tp.to_string()).collect();
        let records: u64 = handles.iter().filter_map(|h| h.read_store().ok()?.state().ok()).map(|state| state.record_count).sum();
        let restored = crate::metrics::SNAPSHOT_RESTORES.get();
        let elapsed = started.elapsed().as_secs_f64();
        if serving + refused.len() == handles.len() {
            say(&format!("restore done: {serving} partitions serving, {restored} restored from snapshots, {records} records, in {elapsed:.1} s"));
            if !refused.is_empty() {
                say(&format!("restore: {} partitions refused (GET /v1/ns/NS says why): {}", refused.len(), refused.join(", ")));
            }
            return;
        }
        if started.elapsed() >= RESTORE_REPORT_MAX {
            say(&format!("restore: {serving} of {} partitions serving after {elapsed:.0} s; GET /v1/ns/NS says which catch up", handles.len()));
            return;
        }
        // The first sum counts serving stores; the second, every record written
        // from a snapshot (partitions restoring now too, a failed try again).
        let streamed = crate::metrics::SNAPSHOT_RECORDS_RESTORED.get();
        say(&format!(
            "restore: {serving} of {} partitions serving, {restored} restored from snapshots, {records} records so far \
             ({streamed} written from snapshots)",
            handles.len()
        ));
    }
}

/// Tells the embedded log where each partition's oldest retained snapshot
/// starts, so retention may delete what every snapshot covers. A partition
/// whose snapshots cannot be listed keeps its floor (nothing more is deleted).
async fn set_snapshot_floors(log: &EmbeddedLog, node: &Node, snapshots: &Snapshots) {
    for ns in node.namespaces() {
        for handle in &ns.handles {
            match snapshots.list(&ns.name, handle.partition).await {
                Ok(manifests) => {
                    if let Some((oldest, _)) = manifests.last() {
                        log.set_snapshot_floor(&handle.tp, *oldest);
                    }
                }
                Err(e) => tracing::warn!(tp = %handle.tp, error = %e, "cannot list snapshots; log retention waits"),
            }
        }
    }
}

/// Gossips with the cluster when `gossip` is set; otherwise this node is alone.
async fn join_cluster(settings: &Settings, node: &Arc<Node>, api: std::net::SocketAddr, client: PeerClient) -> anyhow::Result<Arc<Cluster>> {
    let me = SelfInfo {
        id: settings.node_id.clone(),
        region: settings.region.clone(),
        group: settings.group.clone(),
        api: api.to_string(),
        api_for: settings.advertise_api_for.clone(),
    };
    let Some(gossip) = &settings.gossip else { return Ok(Cluster::alone(me, node.clone(), client)) };
    let listen: std::net::SocketAddr = gossip.parse().map_err(|e| anyhow::anyhow!("gossip must be IP:PORT (UDP), got {gossip:?}: {e}"))?;
    anyhow::ensure!(listen.port() != 0, "gossip needs a fixed port: peers reach this node there (got {gossip:?})");
    let advertise = settings.gossip_advertise_addr()?.unwrap_or(listen);
    let config = GossipConfig {
        listen,
        advertise,
        seeds: settings.seeds.clone(),
        // Nodes of clusters that share seeds by mistake never merge.
        cluster_id: format!("tern:{}", settings.kafka_topic_prefix),
        interval: Duration::from_millis(settings.gossip_interval_ms),
        key: settings.cluster_key()?,
    };
    Cluster::join(me, node.clone(), config, client).await
}

/// How this node reaches the others: over TLS when it serves TLS, with the
/// root token as its own credential (the nodes of a cluster share it).
fn peer_client(settings: &Settings, root_token: Option<String>) -> anyhow::Result<PeerClient> {
    let client = match tls_config(settings) {
        Some(config) => {
            let identity = Some((config.cert_file.as_path(), config.key_file.as_path()));
            PeerClient::secure(settings.cluster_ca_file.as_deref(), identity)?
        }
        None => PeerClient::plain(),
    };
    Ok(client.with_credential(root_token))
}

/// With Kafka, the log's retention is Kafka's: a replica restoring the newest
/// snapshot needs the topic to still hold everything after it. Warns (logs
/// and `tern_kafka_retention_shorter_than_snapshots`) when a topic keeps
/// entries for less than the snapshot interval.
async fn check_kafka_retention(kafka: &KafkaLog, node: &Node, snapshot_interval: Duration) {
    for ns in node.namespaces() {
        let short = match kafka.topic_retention_ms(&ns.name).await {
            Ok(Some(ms)) if u128::from(ms) < snapshot_interval.as_millis() => {
                tracing::warn!(
                    ns = %ns.name, retention_ms = ms, snapshot_interval_ms = snapshot_interval.as_millis() as u64,
                    "the topic keeps entries for less than the snapshot interval: a replica restoring the newest \
                     snapshot may find the entries after it deleted and refuse the partition; raise the topic's \
                     retention.ms or lower snapshot_interval_ms"
                );
                1
            }
            Ok(_) => 0,
            Err(e) => {
                tracing::warn!(ns = %ns.name, error = %e, "cannot read the topic's retention");
                0
            }
        };
        crate::metrics::KAFKA_RETENTION_SHORT.with_label_values(&[&ns.name]).set(short);
    }
}

/// The log the settings name: the embedded log (returned twice: it also needs
/// its retention enforced) or Kafka (also returned twice, for its retention check).
async fn open_log(settings: &Settings) -> anyhow::Result<(Arc<dyn Log>, Option<EmbeddedLog>, Option<KafkaLog>)> {
    if let Some(servers) = settings.log.strip_prefix("kafka://") {
        let kafka = KafkaLog::connect(settings.kafka_log_config(servers)?)?;
        reach_kafka(&kafka, servers).await?;
        tracing::info!(%servers, "kafka log connected");
        return Ok((Arc::new(kafka.clone()), None, Some(kafka)));
    }
    let log_config = settings.embedded_log_config()?;
    if settings.restore {
        set_aside_a_lost_log(&settings.data_dir, &log_config.dir)?;
    }
    let embedded = tokio::task::spawn_blocking(move || EmbeddedLog::open(log_config)).await??;
    Ok((Arc::new(embedded.clone()), Some(embedded), None))
}

/// `--restore` on a node whose embedded log lost its metadata (both
/// copies fail their checks, so no entry can be read): moves the log to
/// `damaged/log.<unix ms>` (kept for inspection) so a new one starts, and
/// each partition continues from its store or its newest snapshot. The
/// refusal without `--restore` names what is lost (`meta_lost_reason`).
fn set_aside_a_lost_log(data_dir: &std::path::Path, log_dir: &std::path::Path) -> anyhow::Result<()> {
    use crate::log::embedded::MetaState;
    let (state, held_bytes) = EmbeddedLog::inspect_meta(log_dir)?;
    if state != MetaState::Lost && !(state == MetaState::Missing && held_bytes > 0) {
        return Ok(());
    }
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let kept = data_dir.join("damaged").join(format!("log.{now_ms:013}"));
    std::fs::create_dir_all(kept.parent().expect("has a parent"))?;
    std::fs::rename(log_dir, &kept)
        .map_err(|e| anyhow::anyhow!("--restore: moving the lost log {} to {}: {e}", log_dir.display(), kept.display()))?;
    tracing::error!(kept = %kept.display(), held_bytes,
        "--restore: the embedded log's metadata was lost; the log was moved aside and a new one starts. Each partition \
         continues from its store (or its newest snapshot); writes acknowledged after that are lost");
    Ok(())
}

/// How long a starting node keeps trying to reach Kafka (a broker starting
/// beside it, or restarting) before it gives up with the address.
const KAFKA_REACH_WAIT: Duration = Duration::from_secs(30);
const KAFKA_REACH_RETRY_MIN: Duration = Duration::from_millis(250);
const KAFKA_REACH_RETRY_MAX: Duration = Duration::from_secs(2);

/// Waits until Kafka answers (lists its topics), at most `KAFKA_REACH_WAIT`;
/// then fails with the brokers' address in the message (a wrong address is
/// said within that bound, not after a hang).
async fn reach_kafka(kafka: &KafkaLog, servers: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + KAFKA_REACH_WAIT;
    let mut wait = KAFKA_REACH_RETRY_MIN;
    loop {
        match kafka.list_topics().await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() + wait >= deadline => {
                anyhow::bail!("cannot reach Kafka at {servers} within {}s: {e}", KAFKA_REACH_WAIT.as_secs())
            }
            Err(e) => {
                tracing::warn!(%servers, error = %e, retry_in = ?wait, "Kafka does not answer yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(KAFKA_REACH_RETRY_MAX);
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
/// `tern check`: a stopped node's data directory verified offline (`node::check`).
pub(crate) fn check_data_dir(data_dir: &std::path::Path) -> std::io::Result<crate::node::check::DataDirCheck> {
    crate::node::check::check_data_dir(data_dir)
}

pub(crate) async fn shutdown_signal() {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler installs");
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}
