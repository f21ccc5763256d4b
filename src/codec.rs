//! The log entry codec: Tern's mutations to and from the versioned protobuf
//! schema in `proto/tern/log/v1/mutation.proto`.
//!
//! `encode` is used by writers (the API); `decode` by every replica's apply
//! loop. `decode` is the single gate through which log bytes become state, so
//! it validates everything a foreign producer could get wrong, and it is a pure
//! function of (bytes, partition, partition count): every replica reaches the
//! same verdict on the same entry.

use bytes::Bytes;
use prost::Message;

use crate::limits;
use crate::partitioner::partition_of;

/// The generated protobuf types.
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/tern.log.v1.rs"));
}

/// The schema version this code writes and understands.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// The record must exist at exactly this version.
    IfVersion(u64),
    /// The record must not exist.
    IfAbsent,
    /// Tree ops: the value at the op's path hashes to this (`tree::etag`).
    IfTreeHash([u8; 32]),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// Put this JSON text (validated, at most 1 MiB).
    Put(Bytes),
    Delete,
    /// A JSON-tree write at path `sk` of tree `pk` (`tree.rs`).
    Tree(TreeOp),
    /// Deploys procedure `sk` on this partition: its definition, JSON text
    /// (checked by `procedure::Definition::parse` at apply). `pk` is empty.
    Procedure(Bytes),
}

/// A write into a JSON tree (the Firebase model): applied by `tree::apply`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeOp {
    /// False: set the value at the path (null deletes). True: `value` is an
    /// object of relative paths, each set so, all at once.
    pub merge: bool,
    /// JSON text, validated by `tree::validate_write`.
    pub value: Bytes,
    /// The writer's clock (ms since the epoch): server timestamps.
    pub time_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub pk: String,
    pub sk: String,
    pub kind: OpKind,
    pub condition: Option<Condition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mutation {
    pub write_id: Bytes,
    pub ops: Vec<Op>,
    /// A journaled write's place in its journal (set when it is sequenced).
    pub journal: Option<JournalPlace>,
    /// What the writer's Firebase rules read when they allowed it: checked
    /// at apply after the ops' conditions, before any op (`apply::batch`);
    /// empty for other writers.
    pub reads: Vec<TreeRead>,
    /// Who wrote it: the API key's id, `root`, `jwt:<sub>`, or empty (no
    /// authentication, or a writer that does not say). At most
    /// `WRITER_BYTES_MAX` bytes; shown in a record's history, never
    /// used to decide anything (`store::history`).
    pub writer: String,
    /// How many versions of each record its puts and deletes keep in the
    /// record's history (`store::history`; at most `HISTORY_MAX_MAX`;
    /// 0: none, and what the record had goes); None: leave it as it is.
    pub history_max: Option<u32>,
}

/// One location a writer's Firebase rules read (`firebase::commit`): the
/// tree `pk`'s value at `sk`, priorities included, hashed as an ETag is
/// (`store::tree::hash_for_rules`). The mutation
/// applies only if every read still hashes so: rules and commit are one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeRead {
    pub pk: String,
    pub sk: String,
    pub hash: [u8; 32],
}

/// Where a journaled write sits in its journal: applied in `lane` order,
/// each offset once (`apply::batch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalPlace {
    /// One journal's topic for the namespace (its journal id and the
    /// topic's incarnation), at most `JOURNAL_LANE_BYTES_MAX` bytes.
    pub lane: Bytes,
    pub offset: u64,
    /// Every entry of the lane below this is known applied.
    pub from: u64,
    /// The lane's offsets `gap_from..offset` were lost from the journal, and
    /// the operator accepted it (`--accept-journal-loss`): this entry is the
    /// lane's next once the lane reached `gap_from`. Below `offset`, at least
    /// `from` (checked at decode).
    pub gap_from: Option<u64>,
}

/// Where a journaled entry stands in its lane (`JournalPlace::decide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneTurn {
    /// The lane's next entry: apply it; the lane then goes on at `offset + 1`.
    Next,
    /// A copy of an entry decided before.
    Repeated { lane_next: u64 },
    /// Entries before it were not decided yet: it waits for them (its
    /// sequencer appends it again after them).
    Ahead { lane_next: u64 },
}

impl JournalPlace {
    /// The lane rule every replica applies (issue 36; gaps: issue 37): the
    /// lane's next offset is `from` (every entry below is known applied) or
    /// what the store remembers (`stored`), whichever is later. An entry
    /// below it is a copy; one at it is next; one above it waits, unless
    /// the offsets between were lost and accepted (`gap_from` at or below
    /// the lane's next).
    pub fn decide(&self, stored: Option<u64>) -> LaneTurn {
        let lane_next = stored.unwrap_or(0).max(self.from);
        if self.offset < lane_next {
            return LaneTurn::Repeated { lane_next };
        }
        if lane_next < self.gap_from.unwrap_or(self.offset) {
            return LaneTurn::Ahead { lane_next };
        }
        LaneTurn::Next
    }

    fn to_proto(&self) -> proto::JournalPlace {
        proto::JournalPlace { lane: self.lane.clone(), offset: self.offset, from: self.from, gap_from: self.gap_from }
    }

    fn from_proto(place: proto::JournalPlace) -> JournalPlace {
        JournalPlace { lane: place.lane, offset: place.offset, from: place.from, gap_from: place.gap_from }
    }
}

/// The longest journal lane name an entry may carry.
pub const JOURNAL_LANE_BYTES_MAX: usize = 128;

/// Why an entry was skipped. Stable names: they are metric label values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("not a protobuf Mutation")]
    Undecodable,
    #[error("unknown format version {0}")]
    UnknownFormat(u32),
    #[error("violates a limit: {0}")]
    Limit(String),
    #[error("op has no kind")]
    NoKind,
    #[error("put value is not valid JSON")]
    InvalidJson,
    #[error("tree op: {0}")]
    Tree(String),
    #[error("op pk belongs to partition {actual}, not {expected}")]
    WrongPartition { expected: u32, actual: u32 },
    #[error("procedure: {0}")]
    Procedure(String),
}

impl Malformed {
    /// Every `label`, as the metrics make them exist from the start.
    pub const LABELS: [&'static str; 8] =
        ["undecodable", "unknown_format", "limit", "no_kind", "invalid_json", "wrong_partition", "tree", "procedure"];

    pub fn label(&self) -> &'static str {
        match self {
            Malformed::Undecodable => "undecodable",
            Malformed::UnknownFormat(_) => "unknown_format",
            Malformed::Limit(_) => "limit",
            Malformed::NoKind => "no_kind",
            Malformed::InvalidJson => "invalid_json",
            Malformed::WrongPartition { .. } => "wrong_partition",
            Malformed::Tree(_) => "tree",
            Malformed::Procedure(_) => "procedure",
        }
    }
}

/// Bytes of a mutation's payload digest (`Mutation::payload_digest`).
pub const PAYLOAD_DIGEST_BYTES: usize = 16;

impl Mutation {
    /// Bytes of keys and values, the measure of the 4 MiB mutation limit.
    pub fn payload_bytes(&self) -> usize {
        self.ops.iter().map(Op::payload_bytes).sum()
    }

    /// What the write asks for, as a digest (128 bits of BLAKE3): every op's
    /// keys, kind, value and condition — not the write id, and not a tree
    /// op's clock, which a retry of the same request stamps anew. A write id
    /// seen again with another digest is a reused key, not a retry.
    pub fn payload_digest(&self) -> [u8; PAYLOAD_DIGEST_BYTES] {
        let mut hasher = blake3::Hasher::new_derive_key("tern mutation payload v1");
        let mut field = |bytes: &[u8]| {
            hasher.update(&(bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        };
        for op in &self.ops {
            field(op.pk.as_bytes());
            field(op.sk.as_bytes());
            match &op.kind {
                OpKind::Put(value) => (field(b"put"), field(value)),
                OpKind::Delete => (field(b"delete"), ()),
                OpKind::Tree(tree) => (field(if tree.merge { b"merge" } else { b"set" }), field(&tree.value)),
                OpKind::Procedure(definition) => (field(b"procedure"), field(definition)),
            };
            match op.condition {
                None => field(b"none"),
                Some(Condition::IfVersion(version)) => (field(b"if_version"), field(&version.to_le_bytes())).1,
                Some(Condition::IfAbsent) => field(b"if_absent"),
                Some(Condition::IfTreeHash(hash)) => (field(b"if_tree_hash"), field(&hash)).1,
            }
        }
        let mut digest = [0; PAYLOAD_DIGEST_BYTES];
        digest.copy_from_slice(&hasher.finalize().as_bytes()[..PAYLOAD_DIGEST_BYTES]);
        digest
    }
}

impl Op {
    pub fn payload_bytes(&self) -> usize {
        let value = match &self.kind {
            OpKind::Put(v) => v.len(),
            OpKind::Delete => 0,
            OpKind::Tree(t) => t.value.len(),
            OpKind::Procedure(v) => v.len(),
        };
        self.pk.len() + self.sk.len() + value
    }
}

/// Encodes `mutation` stamped with the writer's clock now (`time_ms`: the
/// partition's log time, which procedures read, comes from it).
pub fn encode(mutation: &Mutation) -> Vec<u8> {
    encode_at(mutation, now_ms())
}

/// Encodes `mutation` stamped with `time_ms` (0: not known).
pub fn encode_at(mutation: &Mutation, time_ms: u64) -> Vec<u8> {
    let message = proto::Mutation {
        format: FORMAT_VERSION,
        write_id: mutation.write_id.clone(),
        ops: mutation.ops.iter().map(encode_op).collect(),
        time_ms,
        tick: false,
        outbox_published_below: 0,
        journal: mutation.journal.as_ref().map(JournalPlace::to_proto),
        reads: mutation
            .reads
            .iter()
            .map(|read| proto::TreeRead { pk: read.pk.clone(), sk: read.sk.clone(), hash: Bytes::copy_from_slice(&read.hash) })
            .collect(),
        writer: mutation.writer.clone(),
        history_max: mutation.history_max,
    };
    message.encode_to_vec()
}

/// A tick at `time_ms`: no ops, only the time (decodes to a mutation without ops).
pub fn encode_tick(time_ms: u64) -> Vec<u8> {
    encode_trim(time_ms, 0)
}

/// A tick at `time_ms` that also says the outbox is published below
/// `published_below` (`outbox_published_below`): replicas trim it.
pub fn encode_trim(time_ms: u64, published_below: u64) -> Vec<u8> {
    let message = proto::Mutation {
        format: FORMAT_VERSION,
        ops: Vec::new(),
        time_ms,
        tick: true,
        outbox_published_below: published_below,
        ..Default::default()
    };
    message.encode_to_vec()
}

/// `entry` (an encoded mutation, as journaled) with its place in the
/// journal set: what the sequencer appends. Everything else, the writer's
/// time included, is kept as it was.
pub fn with_journal_place(entry: &Bytes, place: &JournalPlace) -> Result<Bytes, Malformed> {
    assert!(!place.lane.is_empty() && place.lane.len() <= JOURNAL_LANE_BYTES_MAX, "a lane name's length is bounded");
    let mut message = proto::Mutation::decode(entry.clone()).map_err(|_| Malformed::Undecodable)?;
    message.journal = Some(place.to_proto());
    Ok(Bytes::from(message.encode_to_vec()))
}

/// A tick's `outbox_published_below` (0 for any other entry, or none).
pub fn outbox_published_below(entry: &Bytes) -> u64 {
    match proto::Mutation::decode(entry.clone()) {
        Ok(message) if message.tick => message.outbox_published_below,
        _ => 0,
    }
}

/// The wall clock in ms since the Unix epoch (0 before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn encode_op(op: &Op) -> proto::Op {
    let (kind, value, time_ms) = match &op.kind {
        OpKind::Put(v) => (proto::op::Kind::Put, v.clone(), 0),
        OpKind::Delete => (proto::op::Kind::Delete, Bytes::new(), 0),
        OpKind::Tree(t) if t.merge => (proto::op::Kind::TreeMerge, t.value.clone(), t.time_ms),
        OpKind::Tree(t) => (proto::op::Kind::TreeSet, t.value.clone(), t.time_ms),
        OpKind::Procedure(v) => (proto::op::Kind::Procedure, v.clone(), 0),
    };
    let condition = op.condition.map(|c| proto::Condition {
        check: Some(match c {
            Condition::IfVersion(v) => proto::condition::Check::IfVersion(v),
            Condition::IfAbsent => proto::condition::Check::IfAbsent(true),
            Condition::IfTreeHash(h) => proto::condition::Check::IfTreeHash(Bytes::copy_from_slice(&h)),
        }),
    });
    proto::Op { kind: kind as i32, pk: op.pk.clone(), sk: op.sk.clone(), value, condition, time_ms }
}

/// Decodes and fully validates one log entry of `partition` (of `partitions`).
pub fn decode(entry: Bytes, partition: u32, partitions: u32) -> Result<Mutation, Malformed> {
    decode_timed(entry, partition, partitions).map(|(mutation, _)| mutation)
}

/// As `decode`, with the entry's `time_ms` (0: the writer did not say).
pub fn decode_timed(entry: Bytes, partition: u32, partitions: u32) -> Result<(Mutation, u64), Malformed> {
    let message = proto::Mutation::decode(entry).map_err(|_| Malformed::Undecodable)?;
    if message.format != FORMAT_VERSION {
        return Err(Malformed::UnknownFormat(message.format));
    }
    if message.write_id.len() > limits::WRITE_ID_BYTES_MAX {
        return Err(Malformed::Limit(format!("write_id longer than {} bytes", limits::WRITE_ID_BYTES_MAX)));
    }
    if message.history_max.is_some_and(|n| n > crate::limits::HISTORY_MAX_MAX) {
        return Err(Malformed::Limit(format!("history_max over {}", crate::limits::HISTORY_MAX_MAX)));
    }
    if message.writer.len() > limits::WRITER_BYTES_MAX {
        return Err(Malformed::Limit(format!("writer longer than {} bytes", limits::WRITER_BYTES_MAX)));
    }
    if message.journal.as_ref().is_some_and(|place| place.lane.is_empty() || place.lane.len() > JOURNAL_LANE_BYTES_MAX) {
        return Err(Malformed::Limit(format!("a journal lane has 1 to {JOURNAL_LANE_BYTES_MAX} bytes")));
    }
    // The lane's next offset is one past it: never past u64::MAX.
    if message.journal.as_ref().is_some_and(|place| place.offset == u64::MAX) {
        return Err(Malformed::Limit("a journal offset is below 2^64 - 1".into()));
    }
    // A gap lies below its entry and at or above what is known applied.
    if message.journal.as_ref().is_some_and(|place| place.gap_from.is_some_and(|gap| gap >= place.offset || gap < place.from)) {
        return Err(Malformed::Limit("a journal gap starts at or above its lane's released mark and below its entry's offset".into()));
    }
    if message.tick {
        if !message.ops.is_empty()
            || !message.write_id.is_empty()
            || message.journal.is_some()
            || !message.reads.is_empty()
            || !message.writer.is_empty()
        {
            return Err(Malformed::Limit("a tick has no ops, no write id, no journal place and no reads".into()));
        }
        // The one mutation without ops: applying it moves the log time.
        return Ok((Mutation::default(), message.time_ms));
    }
    limits::check_ops_count(message.ops.len()).map_err(|e| Malformed::Limit(e.message))?;
    let mut ops = Vec::with_capacity(message.ops.len());
    for op in message.ops {
        ops.push(decode_op(op, partition, partitions)?);
    }
    let reads = decode_reads(message.reads, partition, partitions)?;
    let journal = message.journal.map(JournalPlace::from_proto);
    let mutation = Mutation { write_id: message.write_id, ops, journal, reads, writer: message.writer, history_max: message.history_max };
    limits::check_mutation_bytes(mutation.payload_bytes()).map_err(|e| Malformed::Limit(e.message))?;
    if mutation.ops.len() > 1 && mutation.ops.iter().any(|op| matches!(op.kind, OpKind::Procedure(_))) {
        return Err(Malformed::Procedure("a procedure op must be its mutation's only op".into()));
    }
    Ok((mutation, message.time_ms))
}

/// A mutation's reads (`TreeRead`): bounded in number, each of this
/// partition, at a tree path, with a 32-byte hash.
fn decode_reads(reads: Vec<proto::TreeRead>, partition: u32, partitions: u32) -> Result<Vec<TreeRead>, Malformed> {
    if reads.len() > limits::MUTATION_READS_MAX {
        return Err(Malformed::Limit(format!("more than {} reads", limits::MUTATION_READS_MAX)));
    }
    let mut out: Vec<TreeRead> = Vec::with_capacity(reads.len());
    for read in reads {
        // In order, each once: no read paid twice at apply.
        if out.last().is_some_and(|last| (&last.pk, &last.sk) >= (&read.pk, &read.sk)) {
            return Err(Malformed::Limit("reads are in ascending (pk, sk) order, each once".into()));
        }
        limits::check_pk(&read.pk).map_err(|e| Malformed::Limit(e.message))?;
        limits::check_sk(&read.sk).map_err(|e| Malformed::Limit(e.message))?;
        let actual = partition_of(&read.pk, partitions);
        if actual != partition {
            return Err(Malformed::WrongPartition { expected: partition, actual });
        }
        for key in crate::tree::path::keys_of(&read.sk) {
            crate::tree::path::check_key(key).map_err(|e| Malformed::Tree(format!("read at {:?}: {e}", read.sk)))?;
        }
        let hash = read.hash[..].try_into().map_err(|_| Malformed::Tree("a read's hash is not 32 bytes".into()))?;
        out.push(TreeRead { pk: read.pk, sk: read.sk, hash });
    }
    Ok(out)
}

fn decode_op(op: proto::Op, partition: u32, partitions: u32) -> Result<Op, Malformed> {
    if op.kind == proto::op::Kind::Procedure as i32 {
        return decode_procedure_op(op);
    }
    limits::check_pk(&op.pk).map_err(|e| Malformed::Limit(e.message))?;
    limits::check_sk(&op.sk).map_err(|e| Malformed::Limit(e.message))?;
    let actual = partition_of(&op.pk, partitions);
    if actual != partition {
        return Err(Malformed::WrongPartition { expected: partition, actual });
    }
    let kind = match proto::op::Kind::try_from(op.kind) {
        Ok(proto::op::Kind::Put) => {
            limits::check_value_len(op.value.len()).map_err(|e| Malformed::Limit(e.message))?;
            if !is_json_text(&op.value) {
                return Err(Malformed::InvalidJson);
            }
            OpKind::Put(op.value)
        }
        Ok(proto::op::Kind::Delete) => OpKind::Delete,
        Ok(kind @ (proto::op::Kind::TreeSet | proto::op::Kind::TreeMerge)) => {
            let merge = kind == proto::op::Kind::TreeMerge;
            crate::tree::validate_write(&op.sk, &op.value, merge).map_err(Malformed::Tree)?;
            OpKind::Tree(TreeOp { merge, value: op.value, time_ms: op.time_ms })
        }
        Ok(proto::op::Kind::Procedure) => unreachable!("procedure ops are decoded by decode_procedure_op"),
        Ok(proto::op::Kind::Unspecified) | Err(_) => return Err(Malformed::NoKind),
    };
    let tree = matches!(kind, OpKind::Tree(_));
    let condition = match op.condition.and_then(|c| c.check) {
        None => None,
        Some(proto::condition::Check::IfVersion(v)) if !tree => Some(Condition::IfVersion(v)),
        Some(proto::condition::Check::IfAbsent(true)) if !tree => Some(Condition::IfAbsent),
        Some(proto::condition::Check::IfAbsent(false)) => None,
        Some(proto::condition::Check::IfTreeHash(h)) if tree => {
            Some(Condition::IfTreeHash(h[..].try_into().map_err(|_| Malformed::Tree("if_tree_hash is not 32 bytes".into()))?))
        }
        Some(_) => return Err(Malformed::Tree("a tree op takes only if_tree_hash, a record op never".into())),
    };
    Ok(Op { pk: op.pk, sk: op.sk, kind, condition })
}

/// A procedure op: no pk (it belongs to every partition), the name in `sk`,
/// a JSON definition no larger than a value, no condition. What the
/// definition says is checked at apply (`procedure::Definition::parse`).
fn decode_procedure_op(op: proto::Op) -> Result<Op, Malformed> {
    if !op.pk.is_empty() {
        return Err(Malformed::Procedure("a procedure op has an empty pk".into()));
    }
    if op.sk.is_empty() {
        return Err(Malformed::Procedure("a procedure op names its procedure in sk".into()));
    }
    limits::check_sk(&op.sk).map_err(|e| Malformed::Limit(e.message))?;
    limits::check_value_len(op.value.len()).map_err(|e| Malformed::Limit(e.message))?;
    if !is_json_text(&op.value) {
        return Err(Malformed::InvalidJson);
    }
    if op.condition.and_then(|c| c.check).is_some() {
        return Err(Malformed::Procedure("a procedure op takes no condition".into()));
    }
    Ok(Op { pk: op.pk, sk: op.sk, kind: OpKind::Procedure(op.value), condition: None })
}

/// True when `bytes` is exactly one JSON value (surrounding whitespace allowed).
pub fn is_json_text(bytes: &[u8]) -> bool {
    serde_json::from_slice::<&serde_json::value::RawValue>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk_in(partition: u32, partitions: u32) -> String {
        (0..).map(|i| format!("pk{i}")).find(|pk| partition_of(pk, partitions) == partition).unwrap()
    }

    fn sample(partitions: u32) -> Mutation {
        let pk = pk_in(2, partitions);
        Mutation {
            write_id: Bytes::from_static(b"0123456789abcdef"),
            ops: vec![
                Op { pk: pk.clone(), sk: "a".into(), kind: OpKind::Put(Bytes::from_static(br#"{"x":1}"#)), condition: Some(Condition::IfVersion(0)) },
                Op { pk: pk.clone(), sk: "".into(), kind: OpKind::Delete, condition: Some(Condition::IfAbsent) },
                Op { pk, sk: "b".into(), kind: OpKind::Put(Bytes::from_static(b"[1,2]")), condition: None },
            ],
            journal: None,
            reads: Vec::new(),
            writer: "key:abc".into(),
            history_max: Some(8),
        }
    }

    #[test]
    fn a_writer_and_history_max_round_trip_and_out_of_bounds_are_malformed() {
        let mut m = sample(4);
        m.writer = "é".repeat(limits::WRITER_BYTES_MAX / 2);
        assert_eq!(decode(Bytes::from(encode(&m)), 2, 4).unwrap().writer, m.writer);
        m.writer.push('x');
        let err = decode(Bytes::from(encode(&m)), 2, 4).unwrap_err();
        assert_eq!(err.label(), "limit", "{err}");
        m.writer.clear();
        for (history_max, decodes) in [(None, true), (Some(0), true), (Some(64), true), (Some(65), false)] {
            m.history_max = history_max;
            let decoded = decode(Bytes::from(encode(&m)), 2, 4);
            assert_eq!(decoded.as_ref().ok().map(|d| d.history_max), decodes.then_some(history_max), "{history_max:?}");
        }
    }

    #[test]
    fn round_trip() {
        let m = sample(4);
        let decoded = decode(Bytes::from(encode(&m)), 2, 4).unwrap();
        assert_eq!(decoded, m);
    }

    #[test]
    fn wrong_partition_is_malformed() {
        let m = sample(4);
        let err = decode(Bytes::from(encode(&m)), 1, 4).unwrap_err();
        assert_eq!(err, Malformed::WrongPartition { expected: 1, actual: 2 });
    }

    #[test]
    fn garbage_and_bad_fields_are_malformed() {
        assert_eq!(decode(Bytes::from_static(&[0xff, 0xff, 0xff]), 0, 1).unwrap_err().label(), "undecodable");
        let mut raw = proto::Mutation { format: 2, ops: vec![], time_ms: 0, tick: false, outbox_published_below: 0, ..Default::default() };
        assert_eq!(decode(Bytes::from(raw.encode_to_vec()), 0, 1).unwrap_err(), Malformed::UnknownFormat(2));
        raw.format = 1;
        assert_eq!(decode(Bytes::from(raw.encode_to_vec()), 0, 1).unwrap_err().label(), "limit");
        let op = |kind: proto::op::Kind, value: &'static [u8]| proto::Op {
            kind: kind as i32,
            pk: "k".into(),
            sk: String::new(),
            value: Bytes::from_static(value),
            condition: None,
            time_ms: 0,
        };
        raw.ops = vec![op(proto::op::Kind::Put, b"{not json")];
        assert_eq!(decode(Bytes::from(raw.encode_to_vec()), 0, 1).unwrap_err(), Malformed::InvalidJson);
        raw.ops = vec![op(proto::op::Kind::Unspecified, b"")];
        assert_eq!(decode(Bytes::from(raw.encode_to_vec()), 0, 1).unwrap_err(), Malformed::NoKind);
        raw.ops = vec![op(proto::op::Kind::Put, b" \"ok\" ")];
        assert!(decode(Bytes::from(raw.encode_to_vec()), 0, 1).is_ok());
    }

    /// Issue 37: a place after an accepted journal gap survives the
    /// sequencer's re-encoding and decoding; a gap that does not lie
    /// between the lane's released mark and the entry is malformed, alike
    /// on every replica.
    #[test]
    fn a_journal_gap_round_trips_and_one_out_of_place_is_malformed() {
        let placed = |from, gap_from| {
            let place = JournalPlace { lane: Bytes::from_static(b"lane"), offset: 9, from, gap_from };
            with_journal_place(&Bytes::from(encode(&sample(4))), &place).unwrap()
        };
        let decoded = decode(placed(2, Some(4)), 2, 4).unwrap();
        assert_eq!(decoded.journal, Some(JournalPlace { lane: Bytes::from_static(b"lane"), offset: 9, from: 2, gap_from: Some(4) }));
        assert_eq!(decode(placed(2, None), 2, 4).unwrap().journal.unwrap().gap_from, None);
        assert!(decode(placed(2, Some(2)), 2, 4).is_ok(), "a gap from the released mark itself");
        for (from, gap_from) in [(2, 9), (2, 10), (5, 4), (0, u64::MAX)] {
            let err = decode(placed(from, Some(gap_from)), 2, 4).unwrap_err();
            assert!(err.to_string().contains("journal gap"), "{from} {gap_from}: {err}");
        }
    }

    #[test]
    fn the_lane_rule_decides_copies_waits_and_gaps() {
        let at = |offset, from, gap_from| JournalPlace { lane: Bytes::from_static(b"L"), offset, from, gap_from };
        assert_eq!(at(3, 0, None).decide(Some(3)), LaneTurn::Next);
        assert_eq!(at(3, 0, None).decide(Some(4)), LaneTurn::Repeated { lane_next: 4 });
        assert_eq!(at(3, 0, None).decide(Some(2)), LaneTurn::Ahead { lane_next: 2 });
        assert_eq!(at(3, 3, None).decide(None), LaneTurn::Next, "a lane seen first starts at its released mark");
        assert_eq!(at(3, 0, None).decide(None), LaneTurn::Ahead { lane_next: 0 });
        for lane_next in 1..=3 {
            assert_eq!(at(3, 0, Some(1)).decide(Some(lane_next)), LaneTurn::Next, "anywhere in the gap: {lane_next}");
        }
        assert_eq!(at(3, 0, Some(1)).decide(Some(0)), LaneTurn::Ahead { lane_next: 0 });
        assert_eq!(at(3, 0, Some(1)).decide(Some(4)), LaneTurn::Repeated { lane_next: 4 });
    }

    #[test]
    fn tree_ops_round_trip_and_bad_ones_are_malformed() {
        let tree = |sk: &str, value: &'static str, merge: bool, condition| Mutation {
            ops: vec![Op {
                pk: ".tree".into(),
                sk: sk.into(),
                kind: OpKind::Tree(TreeOp { merge, value: Bytes::from_static(value.as_bytes()), time_ms: 7 }),
                condition,
            }],
            ..Default::default()
        };
        let p = partition_of(".tree", 4);
        let good = tree("a/b", r#"{"c": {".sv": "timestamp"}}"#, false, Some(Condition::IfTreeHash([3; 32])));
        assert_eq!(decode(Bytes::from(encode(&good)), p, 4).unwrap(), good);
        let merge = tree("", r#"{"a/b": 1, "c": null}"#, true, None);
        assert_eq!(decode(Bytes::from(encode(&merge)), p, 4).unwrap(), merge);
        for bad in [
            tree("a.b", "1", false, None),
            tree("a", r#"{"$x": 1}"#, false, None),
            tree("a", r#"{"a": 1, "a/b": 2}"#, true, None),
            tree("a", "1", false, Some(Condition::IfVersion(1))),
        ] {
            assert_eq!(decode(Bytes::from(encode(&bad)), p, 4).unwrap_err().label(), "tree", "{bad:?}");
        }
    }

    #[test]
    fn reads_round_trip_and_bad_ones_are_malformed() {
        let p = partition_of(".tree", 4);
        let with_reads = |reads: Vec<TreeRead>| Mutation {
            ops: vec![Op {
                pk: ".tree".into(),
                sk: "a".into(),
                kind: OpKind::Tree(TreeOp { merge: false, value: Bytes::from_static(b"1"), time_ms: 7 }),
                condition: None,
            }],
            reads,
            ..Default::default()
        };
        let read = |pk: &str, sk: &str| TreeRead { pk: pk.into(), sk: sk.into(), hash: [9; 32] };
        let good = with_reads(vec![read(".tree", ""), read(".tree", "rooms/r1/members")]);
        assert_eq!(decode(Bytes::from(encode(&good)), p, 4).unwrap(), good);
        let most = with_reads((0..limits::MUTATION_READS_MAX).map(|i| read(".tree", &format!("k{i:04}"))).collect());
        assert_eq!(decode(Bytes::from(encode(&most)), p, 4).unwrap(), most);
        let elsewhere = pk_in((p + 1) % 4, 4);
        for (bad, label) in [
            (with_reads((0..=limits::MUTATION_READS_MAX).map(|i| read(".tree", &format!("k{i:04}"))).collect()), "limit"),
            (with_reads(vec![read(".tree", "b"), read(".tree", "a")]), "limit"),
            (with_reads(vec![read(".tree", "a"), read(".tree", "a")]), "limit"),
            (with_reads(vec![read(&elsewhere, "a")]), "wrong_partition"),
            (with_reads(vec![read(".tree", "a.b")]), "tree"),
            (with_reads(vec![read(".tree", "a//b")]), "tree"),
            (with_reads(vec![read(".tree", &"k".repeat(limits::SK_BYTES_MAX + 1))]), "limit"),
        ] {
            assert_eq!(decode(Bytes::from(encode(&bad)), p, 4).unwrap_err().label(), label, "{:?}", &bad.reads[..1]);
        }
        let mut short_hash = proto::Mutation::decode(Bytes::from(encode(&good))).unwrap();
        short_hash.reads[0].hash = Bytes::from_static(&[1; 31]);
        assert_eq!(decode(Bytes::from(short_hash.encode_to_vec()), p, 4).unwrap_err().label(), "tree");
        // A tick carries no reads.
        let mut tick = proto::Mutation::decode(Bytes::from(encode_tick(5))).unwrap();
        tick.reads = short_hash.reads.clone();
        assert_eq!(decode(Bytes::from(tick.encode_to_vec()), p, 4).unwrap_err().label(), "limit");
    }

    #[test]
    fn ticks_carry_only_a_time() {
        assert_eq!(decode_timed(Bytes::from(encode_tick(42)), 3, 4).unwrap(), (Mutation { ops: vec![], ..Default::default() }, 42));
        let mut raw = proto::Mutation::decode(Bytes::from(encode(&sample(4)))).unwrap();
        raw.tick = true;
        assert_eq!(decode(Bytes::from(raw.encode_to_vec()), 2, 4).unwrap_err().label(), "limit");
        let empty = proto::Mutation { format: 1, ops: vec![], time_ms: 1, tick: false, outbox_published_below: 0, ..Default::default() };
        assert_eq!(decode(Bytes::from(empty.encode_to_vec()), 0, 1).unwrap_err().label(), "limit", "no ops and no tick");
    }

    #[test]
    fn invalid_utf8_key_is_undecodable() {
        // Field 2 of Op (pk) with bytes 0xff: proto3 `string` must be UTF-8.
        let op_bytes = [0x08, 0x01, 0x12, 0x01, 0xff];
        let mut entry = vec![0x08, 0x01, 0x1a, op_bytes.len() as u8];
        entry.extend_from_slice(&op_bytes);
        assert_eq!(decode(Bytes::from(entry), 0, 1).unwrap_err(), Malformed::Undecodable);
    }
}
