//! Node settings, from one source: the `settings!` table below. Each entry
//! is one setting: its doc, its name (the config-file key; the flag is
//! `--name-with-dashes`, the environment variable `TERN_NAME`), its type,
//! its default and its bound. From the table come the `Settings` struct (read
//! from a TOML file by serde), its defaults, the checks of every bound, the
//! `tern serve` flags and environment variables (`Overrides`, so
//! `tern serve --help` lists them all), and the table in `docs/settings.md`
//! (a test fails when that file is stale). No default is written anywhere
//! else: the subsystems' configs are built from `Settings` here.
//!
//! Layering: defaults, overridden by the config file (`--config`), overridden
//! by `TERN_*` variables and flags (clap merges those two, flags winning).

mod value;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub use self::value::{Bound, Value};

/// One setting as the docs, the flags and the checks see it.
pub struct Setting {
    /// The config-file key.
    pub name: &'static str,
    /// The flag without its dashes, when it is not the name with dashes.
    flag: Option<&'static str>,
    /// The doc comment, one line per source line.
    doc: &'static str,
    pub bound: Bound,
    /// Whether the flag takes several values.
    list: bool,
    /// Whether the flag may stand alone (a bool: `--auth` is `--auth true`).
    switch: bool,
}

impl Setting {
    /// `--flag-name`, without the dashes.
    pub fn flag(&self) -> String {
        self.flag.map_or_else(|| self.name.replace('_', "-"), str::to_string)
    }

    /// `TERN_NAME`.
    pub fn env(&self) -> String {
        format!("TERN_{}", self.name.to_ascii_uppercase())
    }

    /// The doc as one paragraph.
    pub fn doc(&self) -> String {
        self.doc.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
    }

    /// The default, as shown.
    pub fn default_text(&self) -> String {
        Settings::default().show(self.name)
    }
}

/// Declares the settings: the struct, its defaults, the table, and the
/// per-name operations the flags need. See the module doc.
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident $(($flag:literal))? : $ty:ty = $default:expr, $bound:expr;
    )*) => {
        /// Every setting of a node (see the module doc and `docs/settings.md`).
        #[derive(Debug, Clone, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct Settings {
            $( $(#[doc = $doc])+ pub $name: $ty, )*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings { $( $name: $default, )* }
            }
        }

        /// Every setting, in the table's order.
        pub const SETTINGS: &[Setting] = &[
            $( Setting {
                name: stringify!($name),
                flag: settings!(@flag $($flag)?),
                doc: concat!($($doc, "\n"),+),
                bound: $bound,
                list: <$ty as Value>::LIST,
                switch: <$ty as Value>::SWITCH,
            }, )*
        ];

        impl Settings {
            /// Sets the setting `name` from a flag's or variable's values.
            fn set(&mut self, name: &str, values: Vec<String>) -> Result<(), String> {
                match name {
                    $( stringify!($name) => self.$name = <$ty as Value>::parse(values)?, )*
                    other => unreachable!("{other} is not a setting"),
                }
                Ok(())
            }

            /// The setting `name`'s value, as shown.
            fn show(&self, name: &str) -> String {
                match name {
                    $( stringify!($name) => Value::show(&self.$name), )*
                    other => unreachable!("{other} is not a setting"),
                }
            }

            /// Checks every setting against its own bound.
            fn check_bounds(&self) -> Result<(), String> {
                $( Value::check(&self.$name, stringify!($name), &$bound)?; )*
                Ok(())
            }
        }
    };
    (@flag $flag:literal) => { Some($flag) };
    (@flag) => { None };
}

const MIB: u64 = 1024 * 1024;

settings! {
    /// This node's id (unique in the cluster; Kafka's `client.id` and static group member id).
    node_id: String = "node-1".into(), Bound::NonEmpty;
    /// HTTP address (HTTP/1.1 and h2c).
    listen: String = "127.0.0.1:7070".into(), Bound::Any;
    /// Where the embedded log (`log/`) and the partition stores (`stores/`) live.
    data_dir: PathBuf = "./tern-data".into(), Bound::Any;
    /// The log: `embedded`, or `kafka://HOST:PORT[,HOST:PORT]` (Apache Kafka / Redpanda).
    log: String = "embedded".into(), Bound::Any;
    /// Namespaces to create at start if missing, as `NAME:PARTITIONS`.
    namespaces ("namespace"): Vec<String> = Vec::new(), Bound::Any;
    /// Readers prefer holders in their own region; Kafka's `client.rack`.
    region: String = "local".into(), Bound::NonEmpty;
    /// Replica group; on Kafka the consumer group `<prefix>group.<group>` shares the partitions among its members.
    group: String = "default".into(), Bound::NonEmpty;
    /// UDP `IP:PORT` to gossip on (a fixed port); unset: this node is alone (no cluster view, no forwarding).
    gossip: Option<String> = None, Bound::Any;
    /// Gossip addresses of nodes to join through.
    seeds: Vec<String> = Vec::new(), Bound::Any;
    /// UDP `IP:PORT` peers send gossip to, when it is not `gossip` itself (a NAT, a relay); unset: `gossip`.
    gossip_advertise: Option<String> = None, Bound::Any;
    /// `REGION=HOST:PORT`: the HTTP address nodes of REGION reach this node at (a WAN address, a proxy
    /// between regions); nodes of other regions use the address this node listens on.
    advertise_api_for ("advertise-api-for"): BTreeMap<String, String> = BTreeMap::new(), Bound::Any;
    /// Gossip round interval.
    gossip_interval_ms: u64 = 200, Bound::Range(10, 10_000);
    /// Object store URL for partition snapshots: `file:///dir`, `s3://bucket/prefix` (endpoint, region and
    /// credentials from `AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_ALLOW_HTTP`), `memory://`. A partition with no local store is restored from its newest valid
    /// snapshot at start. `tern dev`: `file://<data-dir>/snapshots`.
    snapshots: Option<String> = None, Bound::Any;
    /// Object store settings as `KEY=VALUE`, overriding the environment: `aws_endpoint`, `aws_region`,
    /// `aws_access_key_id`, `aws_secret_access_key`, `aws_allow_http` (an unknown key is an error), and
    /// `ca_file`: a PEM CA bundle to trust for an `https://` endpoint.
    snapshot_options ("snapshot-option"): BTreeMap<String, String> = BTreeMap::new(), Bound::Any;
    /// Disaster recovery: restore partitions from snapshots of another log (the lost one's) and continue
    /// each empty log partition after its snapshot; writes acknowledged after the snapshots are lost.
    /// Give it once, to start a node whose log was lost from its snapshots (README, "Recovering from a
    /// lost log").
    restore: bool = false, Bound::Any;
    /// Whether this node takes snapshots (any node restores).
    snapshot_writer: bool = true, Bound::Any;
    /// Snapshot a changed partition at least this often.
    snapshot_interval_ms: u64 = 60_000, Bound::Range(1_000, 86_400_000);
    /// Snapshot a partition sooner once this many entries were applied since its last one.
    snapshot_entries: u64 = 100_000, Bound::Min(1);
    /// Snapshots kept per partition (older ones and unreferenced chunks are deleted).
    snapshot_retain: usize = 3, Bound::Range(1, 1_000);
    /// Embedded log: roll segments at this size.
    log_segment_bytes: u64 = 64 * MIB, Bound::Range(MIB as i128, 1024 * MIB as i128);
    /// Embedded log: delete the oldest segments past this total size (never entries a local store has
    /// not made durable, nor any above the oldest retained snapshot).
    log_retention_bytes: Option<u64> = None, Bound::Any;
    /// Embedded log: delete segments older than this (same exceptions).
    log_retention_ms: Option<u64> = None, Bound::Any;
    /// Embedded log: how often retention runs. On Kafka retention is the topic's: keep `retention.ms`
    /// longer than `snapshot_interval_ms` (Tern warns at start otherwise).
    log_retention_check_ms: u64 = 10_000, Bound::Range(100, 3_600_000);
    /// redb page cache, per partition store.
    store_cache_bytes: usize = 32 * MIB as usize, Bound::Min(MIB as i128);
    /// How often each store is made durable (the log is the write-ahead log; a crash replays from here).
    store_fsync_interval_ms: u64 = 1000, Bound::Range(1, 60_000);
    /// Most log entries applied per store transaction.
    apply_batch_max: usize = 1000, Bound::Range(1, 10_000);
    /// Least time between two commits of a busy partition's store (entries arriving meanwhile share one).
    apply_linger_ms: u64 = 1, Bound::Range(0, 100);
    /// Structured log format (level: `TERN_LOG_LEVEL`).
    log_format: String = "text".into(), Bound::OneOf(&["text", "json"]);
    /// Kafka: the topic of namespace N is `<prefix>N`.
    kafka_topic_prefix: String = "tern.".into(), Bound::Any;
    /// Kafka: replication factor of the topics Tern creates. Default (none): 3 when the cluster has at least 3
    /// brokers, else the broker count, with a loud warning (a lost broker then loses acknowledged writes).
    kafka_replication_factor: Option<i32> = None, Bound::Range(1, 16);
    /// Kafka: `min.insync.replicas` of the topics Tern creates (at most the replication factor). Default
    /// (none): 2 with a replication factor of 3 or more, else 1.
    kafka_min_insync_replicas: Option<i32> = None, Bound::Range(1, 16);
    /// Kafka: `group` (the replica group is a Kafka consumer group sharing the partitions; needs `gossip`),
    /// `assign` (hold every partition, no consumer group), or `auto`: `group` with gossip, `assign` without.
    kafka_membership: String = "auto".into(), Bound::OneOf(&["auto", "group", "assign"]);
    /// Kafka, group membership: a silent member's partitions move after this (static membership: a restart
    /// within it keeps them).
    kafka_session_timeout_ms: u64 = 10_000, Bound::Range(1_000, 1_800_000);
    /// Kafka: how long the producer waits to batch writes (`linger.ms`).
    kafka_linger_ms: u64 = 1, Bound::Range(0, 1_000);
    /// Kafka: the longest the broker holds a fetch for more data (`fetch.wait.max.ms`): at most this much
    /// added visibility delay.
    kafka_fetch_wait_max_ms: u64 = 2, Bound::Range(1, 1_000);
    /// Kafka: bytes the broker gathers before answering a fetch (`fetch.min.bytes`): fewer fetches under
    /// load, more write throughput.
    kafka_fetch_min_bytes: usize = 16 * 1024, Bound::Range(1, 16 * MIB as i128);
    /// Kafka: `security.protocol` of the client: `plaintext`, `ssl` (TLS), `sasl_plaintext`, `sasl_ssl`.
    kafka_security_protocol: String = "plaintext".into(), Bound::OneOf(&["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"]);
    /// Kafka: the CA that signed the brokers' certificates (PEM; `ssl.ca.location`). Unset: the system's.
    kafka_ssl_ca_file: Option<PathBuf> = None, Bound::Any;
    /// Kafka: a client certificate (PEM) for brokers that require one, with `kafka_ssl_key_file`.
    kafka_ssl_cert_file: Option<PathBuf> = None, Bound::Any;
    /// Kafka: the client certificate's private key (PEM).
    kafka_ssl_key_file: Option<PathBuf> = None, Bound::Any;
    /// Kafka: the SASL mechanism (`sasl_plaintext`, `sasl_ssl`).
    kafka_sasl_mechanism: String = "PLAIN".into(), Bound::OneOf(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]);
    /// Kafka: the SASL user name.
    kafka_sasl_username: Option<String> = None, Bound::Any;
    /// Kafka: a file holding the SASL password (read at start; never in flags, the environment or logs).
    kafka_sasl_password_file: Option<PathBuf> = None, Bound::Any;
    /// A connection that sends nothing for this long before its first byte, between HTTP/1.1 requests or
    /// within a request head is closed, and an HTTP/2 connection without a stream through a whole wait gets
    /// GOAWAY (streams in flight are not idle). Longer than clients keep idle connections (reqwest: 90 s).
    http_idle_ms: u64 = 120_000, Bound::Range(1_000, 3_600_000);
    /// Security: require `Authorization: Bearer TOKEN` on every route but `/healthz`, `/readyz`, the demo
    /// page (and `/metrics` with `public_metrics`); see docs/security.md. `tern dev --auth` turns it on.
    auth: bool = false, Bound::Any;
    /// Security: the root token's file (every verb everywhere; the nodes of a cluster share it and read the
    /// API keys from each other with it). Made with mode 0600 at first start when missing. Unset with `auth`:
    /// `<data_dir>/admin.token`.
    admin_token_file: Option<PathBuf> = None, Bound::Any;
    /// Security: keys that verify JWTs, as `ALG:PATH`: `HS256:/secret` (at least 32 bytes), `RS256:/pub.pem`,
    /// `ES256:/pub.pem`, `EdDSA:/pub.pem`.
    jwt_keys ("jwt-key"): Vec<String> = Vec::new(), Bound::Any;
    /// Security: a JWKS file (JSON `{"keys": [...]}`) of keys that verify JWTs, chosen by the token's `kid`.
    jwt_jwks_file: Option<PathBuf> = None, Bound::Any;
    /// Security: audiences a JWT's `aud` must name one of (none: `aud` is not checked).
    jwt_audience: Vec<String> = Vec::new(), Bound::Any;
    /// Security: issuers a JWT's `iss` must be one of (none: `iss` is not checked).
    jwt_issuer: Vec<String> = Vec::new(), Bound::Any;
    /// Security: the JWT claim holding the token's grants for Tern's API (a list of `{ns, prefix, verbs}`).
    jwt_grants_claim: String = "tern_grants".into(), Bound::NonEmpty;
    /// Security: serve `/metrics` without a token (else it takes `read` on every namespace).
    public_metrics: bool = false, Bound::Any;
    /// Security: serve `/healthz` and `/readyz` without a token (load balancers and orchestrators probe
    /// them); false: they take any valid token.
    public_health: bool = true, Bound::Any;
    /// Security: failed authentications allowed per minute per client address; past it the address is
    /// answered 429 until its budget refills (0: no limit).
    auth_failures_per_minute: u32 = 60, Bound::Range(0, 1_000_000);
    /// Security: allow `listen` on an address other than loopback without `auth` (anyone who reaches the
    /// port can then read and write everything).
    insecure: bool = false, Bound::Any;
    /// TLS: the listener's certificate chain (PEM). With `tls_key_file`, the listener speaks only TLS
    /// (HTTP/1.1 and HTTP/2 by ALPN) and forwarded requests go to other nodes over https.
    tls_cert_file: Option<PathBuf> = None, Bound::Any;
    /// TLS: the listener's private key (PEM).
    tls_key_file: Option<PathBuf> = None, Bound::Any;
    /// TLS: require client certificates signed by this CA (PEM): mTLS.
    tls_client_ca_file: Option<PathBuf> = None, Bound::Any;
    /// TLS: how often the certificate and key files are looked at; a changed pair is loaded without a
    /// restart (new connections get it).
    tls_reload_ms: u64 = 5_000, Bound::Range(100, 3_600_000);
    /// TLS between nodes: the CA that signed the other nodes' certificates (PEM), checked on forwarded
    /// requests (none: the system's roots). This node presents its own certificate to them.
    cluster_ca_file: Option<PathBuf> = None, Bound::Any;
    /// Cluster: a file holding the cluster's shared secret (at least 32 characters); every gossip datagram
    /// is sealed with a key derived from it, and datagrams that do not verify are dropped and counted. The
    /// same file on every node. Required with `auth` and `gossip` (unless `insecure`).
    cluster_key_file: Option<PathBuf> = None, Bound::Any;
    /// Firebase: the bearer token that is the database owner (admin: rules do not apply), as
    /// `Authorization: Bearer <token>` or `?auth=<token>`. `tern dev`: `owner`, the emulator's. Unset: no owner.
    firebase_owner_token: Option<String> = None, Bound::Any;
    /// Firebase: the emulator's conventions (`tern dev`: true): databases are created on first use, a
    /// database without rules is open (else only the owner may read or write), and an unsigned ID token's
    /// claims are taken as `auth`. Never on a shared network.
    firebase_emulator: bool = false, Bound::Any;
    /// Watches: events one watch's queue holds before it is conflated (`mode=state`) or cut off (`mode=log`).
    watch_queue_events_max: usize = 4096, Bound::Range(1, 1_000_000);
    /// Watches: bytes one watch's queue holds (same consequences).
    watch_queue_bytes_max: usize = 8 * MIB as usize, Bound::Range(64 * 1024, 1024 * MIB as i128);
    /// Watches: how often an idle watch is sent its advanced position (`progress`).
    watch_progress_ms: u64 = 2_000, Bound::Range(10, 600_000);
    /// Watches: how often a quiet watch gets a `keep-alive` event.
    watch_keep_alive_ms: u64 = 15_000, Bound::Range(100, 600_000);
    /// Watches: most a node serves at once.
    watch_subscribers_max: usize = 100_000, Bound::Range(1, 10_000_000);
    /// Watches: recent events each partition keeps in memory for resuming watches (older history is read
    /// from the log).
    watch_ring_events_max: usize = 8192, Bound::Range(1, 10_000_000);
    /// Watches: bytes of recent events each partition keeps.
    watch_ring_bytes_max: usize = 4 * MIB as usize, Bound::Range(1024, 1024 * MIB as i128);
    /// Journaled writes (`?durability=journaled`): entries this node's journal holds that are not yet
    /// sequenced and applied; past it, journaled writes are refused (507 `journal_full`), never dropped.
    journal_entries_max: u64 = 1_000_000, Bound::Range(1, 1_000_000_000);
    /// Ripcord: while the log refuses writes, a plain write (no condition, no `wait=applied`) is journaled
    /// instead of failing: answered 202 `{"write_id", "sequenced": false}` with `x-tern-ripcord: journaled`,
    /// sequenced when the log returns. Off: such writes fail with 503 `log_unavailable`. `tern dev`: on.
    ripcord: bool = false, Bound::Any;
    /// Journaled writes: bytes of the journal's files while it holds entries not yet applied (same
    /// consequence).
    journal_bytes_max: u64 = 1024 * MIB, Bound::Range(MIB as i128, 1024 * 1024 * MIB as i128);
    /// Journaled writes: how long the journal's oldest write may wait to be sequenced and applied; past
    /// it, journaled writes are refused (503 `journal_too_old`): the log has been unavailable too long.
    journal_age_max_ms: u64 = 3_600_000, Bound::Range(1_000, 7 * 24 * 3_600_000);
    /// Journaled writes: also put each group commit in object storage (the `snapshots` store) before the
    /// answer, so a node whose disk is lost loses none (another node replays its journal). Only with
    /// `snapshots`. `tern dev`: only with an explicit `--snapshots`.
    journal_objects: bool = true, Bound::Any;
    /// Journaled writes: a journal in object storage whose owner has not renewed its lease for this long
    /// is claimed and replayed by another node (keep it above the nodes' clock skew and pauses).
    journal_claim_after_ms: u64 = 60_000, Bound::Range(1_000, 7 * 24 * 3_600_000);
    /// Procedures: append a tick (an entry that only moves the log time, so timers fire) to every held
    /// partition with procedures that applied nothing for this long; 0: never (docs/procedures.md).
    procedure_tick_ms: u64 = 1_000, Bound::Range(0, 3_600_000);
    /// Procedures: relay the outboxes of the partitions this node holds to their Kafka output topics,
    /// exactly once (Kafka transactions). One replica group should publish: turn it off in the others
    /// (each partition's publishers fence each other; outputs stay exactly once, but they take turns).
    procedure_publish: bool = true, Bound::Any;
}

impl Settings {
    /// Defaults, overridden by the config file at `file` (if any), overridden
    /// by `overrides` (flags and `TERN_*` variables).
    pub fn load(file: Option<&Path>, overrides: Overrides) -> anyhow::Result<Settings> {
        let mut settings = match file {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        for (name, values) in overrides.0 {
            let setting = SETTINGS.iter().find(|s| s.name == name).expect("overrides name settings");
            settings.set(name, values).map_err(|e| anyhow::anyhow!("--{} / {}: {e}", setting.flag(), setting.env()))?;
        }
        Ok(settings)
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read config file {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
    }

    /// Checks every bound, then what no single setting can say.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.check_bounds().map_err(anyhow::Error::msg)?;
        if let (Some(min_isr), Some(factor)) = (self.kafka_min_insync_replicas, self.kafka_replication_factor) {
            anyhow::ensure!(
                min_isr <= factor,
                "kafka_min_insync_replicas must be at most kafka_replication_factor ({factor})"
            );
        }
        anyhow::ensure!(
            self.gossip_advertise.is_none() || self.gossip.is_some(),
            "gossip_advertise is the address peers send gossip to, and needs gossip set"
        );
        self.gossip_advertise_addr()?;
        for (region, address) in &self.advertise_api_for {
            let port = address.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
            anyhow::ensure!(
                !region.is_empty() && port.and_then(|p| p.parse::<u16>().ok()).is_some_and(|p| p != 0),
                "advertise_api_for takes REGION=HOST:PORT (a region, and a host with a port from 1 to 65535), got {region:?}={address:?}"
            );
        }
        anyhow::ensure!(
            !(self.kafka_membership == "group" && self.gossip.is_none()),
            "kafka_membership = group needs gossip: a node that shares partitions must be able to forward \
             requests for the ones it does not hold (set gossip, or use kafka_membership = assign)"
        );
        anyhow::ensure!(
            self.log == "embedded" || self.log.strip_prefix("kafka://").is_some_and(|hosts| !hosts.is_empty()),
            "log must be `embedded` or kafka://HOST:PORT[,HOST:PORT], got {:?}",
            self.log
        );
        self.namespaces_to_create()?;
        self.check_exposure()?;
        anyhow::ensure!(
            !(self.auth && self.gossip.is_some() && self.cluster_key_file.is_none() && !self.insecure),
            "auth with gossip needs cluster_key_file: unauthenticated gossip would let anyone who reaches the \
             gossip port join the cluster view and be sent forwarded requests (or pass --insecure)"
        );
        anyhow::ensure!(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "tls_cert_file and tls_key_file go together: give both, or neither"
        );
        anyhow::ensure!(
            self.tls_client_ca_file.is_none() || self.tls_cert_file.is_some(),
            "tls_client_ca_file (mTLS) needs TLS: give tls_cert_file and tls_key_file too"
        );
        Ok(())
    }

    /// `gossip_advertise` as a UDP address (None: peers send to `gossip` itself).
    pub fn gossip_advertise_addr(&self) -> anyhow::Result<Option<std::net::SocketAddr>> {
        let Some(address) = &self.gossip_advertise else { return Ok(None) };
        let parsed: std::net::SocketAddr =
            address.parse().map_err(|e| anyhow::anyhow!("gossip_advertise must be IP:PORT (UDP), got {address:?}: {e}"))?;
        anyhow::ensure!(parsed.port() != 0, "gossip_advertise needs a port: peers send gossip there (got {address:?})");
        Ok(Some(parsed))
    }

    /// The gossip key, read from `cluster_key_file`.
    pub fn cluster_key(&self) -> anyhow::Result<Option<crate::cluster::sealed::ClusterKey>> {
        let Some(path) = &self.cluster_key_file else { return Ok(None) };
        let secret = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))?;
        crate::cluster::sealed::ClusterKey::from_secret(&secret)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cluster_key_file {}: {e}", path.display()))
    }

    /// `tern serve` refuses to listen beyond loopback without authentication
    /// unless told `insecure`.
    fn check_exposure(&self) -> anyhow::Result<()> {
        if self.auth || self.insecure {
            return Ok(());
        }
        let loopback = match self.listen.parse::<std::net::SocketAddr>() {
            Ok(address) => address.ip().is_loopback(),
            // A host name: loopback only if it is `localhost`.
            Err(_) => self.listen.rsplit_once(':').is_some_and(|(host, _)| host == "localhost"),
        };
        anyhow::ensure!(
            loopback,
            "refusing to listen on {} without authentication: anyone who reaches it could read and write \
             everything. Turn on auth (--auth, docs/security.md), listen on loopback, or pass --insecure",
            self.listen
        );
        Ok(())
    }

    /// How requests are authenticated (`auth/`), with the root token read
    /// or made; None when `auth` is off.
    pub fn auth_config(&self) -> anyhow::Result<Option<crate::auth::AuthConfig>> {
        if !self.auth {
            return Ok(None);
        }
        let path = self.admin_token_file.clone().unwrap_or_else(|| self.data_dir.join("admin.token"));
        let root_token = crate::auth::load_or_create_root_token(&path)?;
        Ok(Some(crate::auth::AuthConfig {
            root_token: Some(root_token),
            jwt: crate::auth::jwt::JwtConfig {
                keys: self.jwt_keys.clone(),
                jwks_file: self.jwt_jwks_file.clone(),
                audiences: self.jwt_audience.clone(),
                issuers: self.jwt_issuer.clone(),
                grants_claim: self.jwt_grants_claim.clone(),
            },
            failures_per_minute: self.auth_failures_per_minute,
        }))
    }

    /// `namespaces`, parsed: (name, partitions).
    pub fn namespaces_to_create(&self) -> anyhow::Result<Vec<(String, u32)>> {
        self.namespaces
            .iter()
            .map(|spec| {
                let (name, partitions) =
                    spec.split_once(':').ok_or_else(|| anyhow::anyhow!("namespaces: each is NAME:PARTITIONS, got {spec:?}"))?;
                let partitions = partitions.parse().map_err(|_| anyhow::anyhow!("namespaces: bad partition count in {spec:?}"))?;
                Ok((name.to_string(), partitions))
            })
            .collect()
    }

    /// Whether this node joins its replica group's Kafka consumer group.
    pub fn kafka_group_membership(&self) -> bool {
        match self.kafka_membership.as_str() {
            "group" => true,
            "assign" => false,
            _ => self.gossip.is_some(),
        }
    }

    /// The apply loops' settings.
    pub fn apply_config(&self) -> crate::apply::ApplyConfig {
        crate::apply::ApplyConfig {
            batch_entries_max: self.apply_batch_max,
            fsync_interval: Duration::from_millis(self.store_fsync_interval_ms),
            linger: Duration::from_millis(self.apply_linger_ms),
            recovery: crate::apply::Recovery::default(),
        }
    }

    /// The watches' settings.
    pub fn watch_config(&self) -> crate::watch::WatchConfig {
        crate::watch::WatchConfig {
            queue: crate::fanout::QueueLimits { events_max: self.watch_queue_events_max, bytes_max: self.watch_queue_bytes_max },
            progress_interval: Duration::from_millis(self.watch_progress_ms),
            keep_alive_interval: Duration::from_millis(self.watch_keep_alive_ms),
            subscribers_max: self.watch_subscribers_max,
            ring: crate::fanout::RingLimits { events_max: self.watch_ring_events_max, bytes_max: self.watch_ring_bytes_max },
        }
    }

    /// The node's settings, with the snapshot store it restores from (if any).
    pub fn node_config(&self, snapshots: Option<crate::snapshot::Snapshots>) -> crate::node::NodeConfig {
        let recovery = crate::apply::Recovery {
            snapshots: snapshots.clone(),
            into_new_log: self.restore,
            store_cache_bytes: self.store_cache_bytes,
        };
        crate::node::NodeConfig {
            data_dir: self.data_dir.clone(),
            store_cache_bytes: self.store_cache_bytes,
            apply: crate::apply::ApplyConfig { recovery, ..self.apply_config() },
            snapshots,
            snapshot_retain: self.snapshot_retain,
            watch: self.watch_config(),
            journal: crate::journal::JournalLimits {
                entries_max: self.journal_entries_max,
                bytes_max: self.journal_bytes_max,
                age_max: Duration::from_millis(self.journal_age_max_ms),
            },
            ripcord: self.ripcord,
            journal_objects: self.journal_objects,
            journal_claim_after: Duration::from_millis(self.journal_claim_after_ms),
            procedure_tick: Duration::from_millis(self.procedure_tick_ms),
            procedure_publish: self.procedure_publish,
            node_id: self.node_id.clone(),
        }
    }

    /// When this node takes snapshots.
    pub fn snapshot_policy(&self) -> crate::node::snapshots::SnapshotPolicy {
        crate::node::snapshots::SnapshotPolicy {
            interval: Duration::from_millis(self.snapshot_interval_ms),
            entries: self.snapshot_entries,
            retain: self.snapshot_retain,
        }
    }

    /// The embedded log's settings.
    pub fn embedded_log_config(&self) -> crate::log::embedded::EmbeddedLogConfig {
        crate::log::embedded::EmbeddedLogConfig {
            segment_bytes_max: self.log_segment_bytes,
            retention_bytes: self.log_retention_bytes,
            retention_ms: self.log_retention_ms,
            ..crate::log::embedded::EmbeddedLogConfig::new(self.data_dir.join("log"))
        }
    }

    /// The Kafka log's settings, for the brokers `servers`.
    pub fn kafka_log_config(&self, servers: &str) -> anyhow::Result<crate::log::kafka::KafkaLogConfig> {
        use crate::log::kafka::{KafkaLogConfig, Membership};
        Ok(KafkaLogConfig {
            client_id: self.node_id.clone(),
            rack: self.region.clone(),
            topic_prefix: self.kafka_topic_prefix.clone(),
            replication_factor: self.kafka_replication_factor,
            min_insync_replicas: self.kafka_min_insync_replicas,
            linger: Duration::from_millis(self.kafka_linger_ms),
            fetch_wait_max: Duration::from_millis(self.kafka_fetch_wait_max_ms),
            fetch_min_bytes: self.kafka_fetch_min_bytes,
            membership: match self.kafka_group_membership() {
                false => Membership::AssignAll,
                true => Membership::Group {
                    group: self.group.clone(),
                    instance_id: self.node_id.clone(),
                    session_timeout: Duration::from_millis(self.kafka_session_timeout_ms),
                },
            },
            security: self.kafka_security()?,
            ..KafkaLogConfig::new(servers)
        })
    }

    /// The Kafka client's security settings, with the SASL password read from its file.
    fn kafka_security(&self) -> anyhow::Result<crate::log::kafka::KafkaSecurity> {
        let sasl = self.kafka_security_protocol.starts_with("sasl");
        anyhow::ensure!(
            !sasl || (self.kafka_sasl_username.is_some() && self.kafka_sasl_password_file.is_some()),
            "kafka_security_protocol = {} needs kafka_sasl_username and kafka_sasl_password_file",
            self.kafka_security_protocol
        );
        anyhow::ensure!(
            self.kafka_ssl_cert_file.is_some() == self.kafka_ssl_key_file.is_some(),
            "kafka_ssl_cert_file and kafka_ssl_key_file go together"
        );
        let sasl_password = match &self.kafka_sasl_password_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("kafka_sasl_password_file {}: {e}", path.display()))?
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
            ),
            None => None,
        };
        Ok(crate::log::kafka::KafkaSecurity {
            protocol: self.kafka_security_protocol.clone(),
            ca_file: self.kafka_ssl_ca_file.clone(),
            cert_file: self.kafka_ssl_cert_file.clone(),
            key_file: self.kafka_ssl_key_file.clone(),
            sasl_mechanism: self.kafka_sasl_mechanism.clone(),
            sasl_username: self.kafka_sasl_username.clone(),
            sasl_password,
        })
    }

    /// The settings as a Markdown table (`docs/settings.md` is this, generated).
    pub fn markdown_table() -> String {
        let mut out = String::from("| key (file) | flag | environment | default | bound | meaning |\n|---|---|---|---|---|---|\n");
        for s in SETTINGS {
            let cell = |text: String| text.replace('|', "\\|");
            let flag = if s.list { format!("`--{} V[,V]`", s.flag()) } else { format!("`--{}`", s.flag()) };
            out.push_str(&format!(
                "| `{}` | {flag} | `{}` | `{}` | {} | {} |\n",
                s.name,
                s.env(),
                cell(s.default_text()),
                cell(s.bound.describe()),
                cell(s.doc())
            ));
        }
        out
    }
}

/// The settings given as flags or `TERN_*` environment variables (clap reads
/// both; a flag wins over its variable): `(name, values)` in table order.
/// `tern serve` flattens it into its arguments.
#[derive(Debug, Clone, Default)]
pub struct Overrides(Vec<(&'static str, Vec<String>)>);

impl clap::FromArgMatches for Overrides {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let given = SETTINGS
            .iter()
            .filter_map(|s| matches.get_many::<String>(s.name).map(|values| (s.name, values.cloned().collect())))
            .collect();
        Ok(Overrides(given))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Overrides::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Overrides {
    fn augment_args(command: clap::Command) -> clap::Command {
        SETTINGS.iter().fold(command, |command, s| command.arg(argument(s)))
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Overrides::augment_args(command)
    }
}

/// The flag of one setting, with its variable, doc, default and bound in `--help`.
fn argument(s: &Setting) -> clap::Arg {
    let default = s.default_text();
    let bound = s.bound.describe();
    let mut long_help = format!("{}\n[default: {default}]", s.doc());
    if !bound.is_empty() {
        long_help.push_str(&format!(" [bound: {bound}]"));
    }
    let arg = clap::Arg::new(s.name)
        .long(s.flag())
        .env(s.env())
        .value_name("VALUE")
        .help(format!("{} [default: {default}]", s.doc()))
        .long_help(long_help);
    match (s.list, s.switch) {
        (true, _) => arg.action(clap::ArgAction::Append).value_delimiter(','),
        (false, true) => arg.action(clap::ArgAction::Set).num_args(0..=1).default_missing_value("true"),
        (false, false) => arg.action(clap::ArgAction::Set),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bound_and_cross_check_is_enforced() {
        let bad = |change: fn(&mut Settings), needle: &str| {
            let mut s = Settings::default();
            change(&mut s);
            let error = s.validate().unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        };
        bad(|s| s.kafka_membership = "sometimes".into(), "kafka_membership must be");
        bad(|s| s.kafka_membership = "group".into(), "needs gossip");
        bad(|s| s.kafka_session_timeout_ms = 10, "kafka_session_timeout_ms");
        bad(|s| s.kafka_linger_ms = 5_000, "kafka_linger_ms");
        bad(|s| s.kafka_fetch_wait_max_ms = 0, "kafka_fetch_wait_max_ms");
        bad(|s| s.kafka_fetch_min_bytes = 0, "kafka_fetch_min_bytes");
        bad(
            |s| (s.kafka_replication_factor, s.kafka_min_insync_replicas) = (Some(1), Some(2)),
            "kafka_min_insync_replicas must be at most kafka_replication_factor",
        );
        bad(|s| s.gossip_interval_ms = 1, "gossip_interval_ms");
        bad(|s| s.gossip_advertise = Some("127.0.0.1:7946".into()), "needs gossip set");
        bad(
            |s| (s.gossip, s.gossip_advertise) = (Some("127.0.0.1:7946".into()), Some("relay:7946".into())),
            "gossip_advertise must be IP:PORT",
        );
        bad(
            |s| (s.gossip, s.gossip_advertise) = (Some("127.0.0.1:7946".into()), Some("127.0.0.1:0".into())),
            "gossip_advertise needs a port",
        );
        for (region, address) in [("eu", ""), ("eu", "127.0.0.1"), ("eu", ":80"), ("eu", "h:0"), ("eu", "h:65536"), ("eu", "h:x"), ("", "h:80")] {
            let mut s = Settings::default();
            s.advertise_api_for = [(region.to_string(), address.to_string())].into();
            let error = s.validate().unwrap_err().to_string();
            assert!(error.contains("advertise_api_for takes REGION=HOST:PORT"), "{region:?}={address:?}: {error}");
        }
        let mut s = Settings::default();
        s.advertise_api_for = [("ap-south".to_string(), "[::1]:7070".to_string()), ("eu".to_string(), "eu.example:443".to_string())].into();
        s.validate().expect("HOST:PORT addresses, IPv6 in brackets, are accepted");
        bad(|s| s.group = String::new(), "group must not be empty");
        bad(|s| s.node_id = String::new(), "node_id must not be empty");
        bad(|s| s.snapshot_interval_ms = 10, "snapshot_interval_ms");
        bad(|s| s.snapshot_entries = 0, "snapshot_entries");
        bad(|s| s.snapshot_retain = 0, "snapshot_retain");
        bad(|s| s.log_retention_check_ms = 1, "log_retention_check_ms");
        bad(|s| s.log_segment_bytes = 1, "log_segment_bytes");
        bad(|s| s.store_cache_bytes = 1, "store_cache_bytes");
        bad(|s| s.apply_batch_max = 0, "apply_batch_max");
        bad(|s| s.apply_linger_ms = 101, "apply_linger_ms");
        bad(|s| s.log_format = "xml".into(), "log_format");
        bad(|s| s.log = "zookeeper://x".into(), "log must be");
        bad(|s| s.namespaces = vec!["nocount".into()], "NAME:PARTITIONS");
        bad(|s| s.watch_queue_events_max = 0, "watch_queue_events_max");
        bad(|s| s.watch_queue_bytes_max = 10, "watch_queue_bytes_max");
        bad(|s| s.watch_progress_ms = 0, "watch_progress_ms");
        bad(|s| s.watch_keep_alive_ms = 1, "watch_keep_alive_ms");
        bad(|s| s.watch_subscribers_max = 0, "watch_subscribers_max");
        bad(|s| s.watch_ring_events_max = 0, "watch_ring_events_max");
        bad(|s| s.watch_ring_bytes_max = 0, "watch_ring_bytes_max");
        bad(|s| s.http_idle_ms = 0, "http_idle_ms must be 1000..=3600000");
        bad(|s| s.listen = "0.0.0.0:7070".into(), "refusing to listen on 0.0.0.0:7070 without authentication");
        bad(|s| s.listen = "[::]:7070".into(), "without authentication");
        bad(|s| s.listen = "example.com:7070".into(), "without authentication");
        bad(|s| s.auth_failures_per_minute = 2_000_000, "auth_failures_per_minute");
        bad(|s| s.jwt_grants_claim = String::new(), "jwt_grants_claim must not be empty");
        bad(|s| (s.auth, s.gossip) = (true, Some("127.0.0.1:7946".into())), "auth with gossip needs cluster_key_file");
        bad(|s| s.tls_cert_file = Some("c.pem".into()), "tls_cert_file and tls_key_file go together");
        bad(|s| s.tls_client_ca_file = Some("ca.pem".into()), "tls_client_ca_file (mTLS) needs TLS");
        for exposed in [Settings { listen: "0.0.0.0:7070".into(), auth: true, ..Default::default() }, Settings { listen: "0.0.0.0:7070".into(), insecure: true, ..Default::default() }] {
            exposed.validate().unwrap();
        }
        for loopback in ["127.0.0.1:0", "127.0.0.2:7070", "[::1]:7070", "localhost:7070"] {
            Settings { listen: loopback.into(), ..Default::default() }.validate().unwrap();
        }
        Settings::default().validate().unwrap();
        let mut s = Settings::default();
        assert!(!s.kafka_group_membership(), "auto without gossip: hold every partition");
        s.gossip = Some("127.0.0.1:7946".into());
        assert!(s.kafka_group_membership(), "auto with gossip: join the replica group");
        s.kafka_membership = "group".into();
        s.validate().unwrap();
    }

    #[test]
    fn file_then_flags_override_defaults_and_unknown_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.toml");
        std::fs::write(&path, "node_id = \"n7\"\nstore_fsync_interval_ms = 250\nnamespaces = [\"a:2\"]\n").unwrap();
        let s = Settings::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(s.node_id, "n7");
        assert_eq!(s.store_fsync_interval_ms, 250);
        assert_eq!(s.listen, "127.0.0.1:7070");
        assert_eq!(s.namespaces_to_create().unwrap(), [("a".to_string(), 2)]);
        s.validate().unwrap();
        let flags = Overrides(vec![("node_id", vec!["n8".into()]), ("seeds", vec!["a:1".into(), "b:2".into()])]);
        let s = Settings::load(Some(&path), flags).unwrap();
        assert_eq!((s.node_id.as_str(), s.seeds.len(), s.store_fsync_interval_ms), ("n8", 2, 250), "flags win, the file stays below");
        let flags = Overrides(vec![("apply_batch_max", vec!["many".into()])]);
        let error = Settings::load(None, flags).unwrap_err().to_string();
        assert!(error.contains("--apply-batch-max / TERN_APPLY_BATCH_MAX") && error.contains("not a number"), "{error}");
        std::fs::write(&path, "node_idd = \"x\"\n").unwrap();
        assert!(Settings::from_file(&path).unwrap_err().to_string().contains("node_idd"));
    }

    #[test]
    fn flags_and_variables_come_from_the_table() {
        use clap::{Args, FromArgMatches};
        let command = Overrides::augment_args(clap::Command::new("t"));
        let matches = command
            .try_get_matches_from(["t", "--snapshot-option", "aws_region=x", "--snapshot-option", "aws_endpoint=y", "--seeds", "a,b"])
            .unwrap();
        let overrides = Overrides::from_arg_matches(&matches).unwrap();
        let s = Settings::load(None, overrides).unwrap();
        assert_eq!(s.snapshot_options.len(), 2);
        assert_eq!(s.seeds, ["a", "b"]);
        for setting in SETTINGS {
            assert!(!setting.doc().is_empty(), "{} has a doc", setting.name);
            assert_eq!(setting.env(), format!("TERN_{}", setting.name.to_uppercase()));
        }
    }

    /// `docs/settings.md` is generated from the table; set
    /// `TERN_UPDATE_DOCS=1` to rewrite it.
    #[test]
    fn the_settings_doc_is_generated_from_the_table() {
        // The checkout the test runs in (cargo runs tests from the package root), not the one
        // that built the binary: a shared target directory serves several checkouts.
        let path = std::env::current_dir().expect("a working directory").join("docs/settings.md");
        let expected = format!(
            "# Settings\n\n<!-- Generated from src/settings/mod.rs by its tests: TERN_UPDATE_DOCS=1 cargo test --release settings. Do not edit. -->\n\n\
             Every setting of `tern serve` is a config-file key (TOML, `--config FILE`), a flag and a `TERN_*`\n\
             environment variable. Flags win over the environment, which wins over the file. List settings take\n\
             several values: repeat the flag, or separate them with commas (in the flag or the variable).\n\
             `tern dev` takes `--listen`, `--data-dir` and `--snapshots`.\n\n{}",
            Settings::markdown_table()
        );
        if std::env::var_os("TERN_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &expected).unwrap();
        }
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(actual == expected, "docs/settings.md is stale: run TERN_UPDATE_DOCS=1 cargo test --release settings");
    }
}
