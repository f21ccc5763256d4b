//! The settings table: every setting of a node, one entry each (its doc,
//! name, type, default and bound), and the macro that makes the `Settings`
//! struct, its defaults, `SETTINGS` and the per-name operations from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::setting::Setting;
use super::value::{Bound, Value};

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
            pub(super) fn set(&mut self, name: &str, values: Vec<String>) -> Result<(), String> {
                match name {
                    $( stringify!($name) => self.$name = <$ty as Value>::parse(values)?, )*
                    other => unreachable!("{other} is not a setting"),
                }
                Ok(())
            }

            /// The setting `name`'s value, as shown.
            pub(super) fn show(&self, name: &str) -> String {
                match name {
                    $( stringify!($name) => Value::show(&self.$name), )*
                    other => unreachable!("{other} is not a setting"),
                }
            }

            /// Checks every setting against its own bound.
            pub(super) fn check_bounds(&self) -> Result<(), String> {
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
    /// `NS/PARTITION@FROM..TO`: go on past exactly these lost log offsets, as a refusal names them
    /// (docs/damage.md): entries in damaged bytes of the embedded log, or, on Kafka, entries deleted below
    /// a partition's start (retention, or `kafka-delete-records` past a batch damaged on every broker) that
    /// no snapshot reaches past. Their writes are lost.
    accept_loss ("accept-loss"): Vec<String> = Vec::new(), Bound::Any;
    /// `NS/PARTITION@FROM..TO`: go on past exactly these lost journal entries (acknowledged journaled
    /// writes not yet sequenced, whose entries were in damaged bytes of the journal), as a refusal names
    /// them (docs/damage.md). Their writes are lost; every other journaled write is still applied.
    accept_journal_loss ("accept-journal-loss"): Vec<String> = Vec::new(), Bound::Any;
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
    /// Scrub: entries of this node's partition stores read per second to find damage on disk before a
    /// reader meets it (each record's checksum; the state hash over a pass the store did not change
    /// during); a damaged partition is rebuilt (docs/damage.md). 0 turns the scrub off.
    scrub_entries_per_second: u64 = 10_000, Bound::Range(0, 10_000_000);
    /// Scrub: the least time between the starts of two rounds over every partition this node serves.
    scrub_interval_ms: u64 = 3_600_000, Bound::Range(1_000, 604_800_000);
    /// Most log entries applied per store transaction.
    apply_batch_max: usize = 1000, Bound::Range(1, 10_000);
    /// Least time between two commits of a busy partition's store (entries arriving meanwhile share one).
    apply_linger_ms: u64 = 1, Bound::Range(0, 100);
    /// Structured log format (level: `TERN_LOG_LEVEL`).
    log_format: String = "text".into(), Bound::OneOf(&["text", "json"]);
    /// Kafka: the topic of namespace N is `<prefix>N`.
    kafka_topic_prefix: String = "tern.".into(), Bound::Any;
    /// Kafka: the existing topics namespaces may read as source topics (`PUT /v1/ns/{ns}` with
    /// `source_topic`): exact names, or prefixes ending in `*`. Empty: none. A namespace's admin binds only
    /// what the operator listed here, and binding needs `cluster_key_file` (Tern signs its own entries there).
    kafka_source_topics ("kafka-source-topic"): Vec<String> = Vec::new(), Bound::Any;
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
    /// Connections the node keeps open at once; one accepted past this is closed at once (counted in
    /// `tern_connections_refused_total`). With the per-connection bounds (docs/bounds.md) it bounds what
    /// clients can make a node hold. Keep the process's file descriptor limit above it.
    http_connections_max: u32 = 50_000, Bound::Range(1, 1_000_000);
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
    /// Security: failed authentications allowed per minute per client address; past it the address's
    /// requests with a token that does not verify are answered 429 until its budget refills (a good token
    /// from it is still served: clients behind one proxy do not lock each other out) (0: no limit).
    auth_failures_per_minute: u32 = 60, Bound::Range(0, 1_000_000);
    /// Browsers: origins whose pages may call this node's API and Firebase paths (CORS), each
    /// `SCHEME://HOST[:PORT]` as a browser sends it in `Origin`, or `*` for any origin. Preflights are
    /// answered before authentication; tokens still decide what a page may do. None: no cross-origin access.
    cors_origins ("cors-origin"): Vec<String> = Vec::new(), Bound::Any;
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
    /// Ripcord: while the log refuses writes, a plain write (no condition, no `wait=applied`, no
    /// `durability=sequenced`) is journaled instead of failing: answered 202 `{"write_id", "sequenced": false}`
    /// with `x-tern-ripcord: journaled`, sequenced when the log returns. A write that may have landed is never
    /// journaled (503 `outcome_unknown`). Off: such writes fail with 503 `log_unavailable`. `tern dev`: on.
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
