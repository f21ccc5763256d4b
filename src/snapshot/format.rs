//! The snapshot format: content-addressed chunks and a manifest.
//!
//! A partition's records (in key order, as the store holds them) are cut into
//! chunks at content-defined boundaries: after a record whose key hash meets
//! a condition (and never before `CHUNK_RAW_BYTES_MIN` / always by
//! `CHUNK_RAW_BYTES_MAX`), so a change to some records moves only the
//! boundaries near them and every other chunk comes out byte-identical to the
//! previous snapshot's. A chunk is `[u32 LE key length][key][u32 LE value
//! length][value]...` (value = the store's `[version u64 LE][JSON]`),
//! compressed with zstd, and named by the BLAKE3 hash of its compressed bytes:
//! a chunk already in the object store is never uploaded again.
//!
//! The manifest (JSON) names the chunks in order with their hashes, sizes and
//! record counts, and the state it reflects (applied offset, counters, state
//! hash). It carries a BLAKE3 checksum of its own content and is written last:
//! a snapshot whose manifest is missing or does not verify does not exist.

use serde::{Deserialize, Serialize};

/// Content-defined chunk boundaries: a chunk ends after a record whose key
/// hash is 0 modulo this (an expected ~64 KiB of 150-byte records), once it
/// holds at least `CHUNK_RAW_BYTES_MIN`...
pub const CHUNK_BOUNDARY_MODULUS: u32 = 400;
pub const CHUNK_RAW_BYTES_MIN: usize = 4 * 1024;
/// ...and always once it holds this much.
pub const CHUNK_RAW_BYTES_MAX: usize = 1024 * 1024;
/// zstd level: fast, with most of the ratio.
pub const ZSTD_LEVEL: i32 = 3;
/// The manifest format this code writes and reads. 2: chunks carry the
/// outcome metadata (write ids, the not-applied record) before the records,
/// and the manifest names the log its offsets belong to. A format-1 snapshot
/// would restore a store that forgets which retries it already applied, so
/// it is refused (take a new snapshot).
pub const MANIFEST_FORMAT: u32 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkRef {
    /// BLAKE3 of the compressed bytes, hex: the chunk's object name.
    pub hash: String,
    pub compressed_bytes: u64,
    pub raw_bytes: u64,
    /// Entries in the chunk: outcome metadata and records.
    pub entries: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub namespace: String,
    pub partition: u32,
    pub partitions: u32,
    /// The log whose offsets these are (`Log::identity`): a snapshot of
    /// another cluster sharing the bucket, or of a topic since deleted and
    /// re-created, is never restored as if it were this log's.
    pub log: String,
    /// The snapshot holds exactly the effect of log offsets below this.
    pub applied_next: u64,
    pub applied_entries: u64,
    pub skipped_entries: u64,
    pub record_count: u64,
    /// Outcome metadata entries (remembered write ids, not-applied marks).
    pub meta_entries: u64,
    /// The lowest offset whose outcome the not-applied record knows
    /// (`journal_from` in the manifest, its name there since format 2).
    #[serde(rename = "journal_from")]
    pub not_applied_from: u64,
    /// The partition's state hash at `applied_next` (hex), checked on restore:
    /// it covers the records and the outcome metadata.
    pub state_hash: String,
    pub created_unix_ms: u64,
    pub chunks: Vec<ChunkRef>,
    /// BLAKE3 (hex) of this manifest serialized with `checksum` empty.
    pub checksum: String,
}

impl Manifest {
    /// Fills in `checksum` and serializes.
    pub fn seal(mut self) -> Vec<u8> {
        self.checksum = String::new();
        let unsealed = serde_json::to_vec(&self).expect("a manifest serializes");
        self.checksum = blake3::hash(&unsealed).to_hex().to_string();
        serde_json::to_vec(&self).expect("a manifest serializes")
    }

    /// Parses and verifies a sealed manifest.
    pub fn open(bytes: &[u8]) -> Result<Manifest, String> {
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let format: Format = serde_json::from_slice(bytes).map_err(|e| format!("manifest is not valid: {e}"))?;
        if format.format != MANIFEST_FORMAT {
            return Err(format!(
                "manifest format {} is not {MANIFEST_FORMAT} (format 1 carries no write ids: restoring it could apply a \
                 retried write twice; take a new snapshot with this build)",
                format.format
            ));
        }
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| format!("manifest is not valid: {e}"))?;
        let claimed = manifest.checksum.clone();
        let unsealed = serde_json::to_vec(&Manifest { checksum: String::new(), ..manifest.clone() }).expect("a manifest serializes");
        let actual = blake3::hash(&unsealed).to_hex().to_string();
        if claimed != actual {
            return Err(format!("manifest checksum mismatch: says {claimed}, content hashes to {actual}"));
        }
        Ok(manifest)
    }

    pub fn total_compressed_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.compressed_bytes).sum()
    }
}

/// Cuts entries into chunks at content-defined boundaries.
#[derive(Default)]
pub struct Chunker {
    raw: Vec<u8>,
    entries: u64,
}

/// One finished chunk, uncompressed.
pub struct RawChunk {
    pub raw: Vec<u8>,
    pub entries: u64,
}

impl Chunker {
    /// Adds a record; returns a finished chunk when this record ends one.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Option<RawChunk> {
        self.raw.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.raw.extend_from_slice(key);
        self.raw.extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.raw.extend_from_slice(value);
        self.entries += 1;
        let boundary = u32::from_le_bytes(blake3::hash(key).as_bytes()[..4].try_into().unwrap()) % CHUNK_BOUNDARY_MODULUS == 0;
        let full = self.raw.len() >= CHUNK_RAW_BYTES_MAX;
        if full || (boundary && self.raw.len() >= CHUNK_RAW_BYTES_MIN) {
            return self.take();
        }
        None
    }

    /// The last, partial chunk, if any records are left.
    pub fn finish(mut self) -> Option<RawChunk> {
        self.take()
    }

    fn take(&mut self) -> Option<RawChunk> {
        (self.entries > 0).then(|| RawChunk { raw: std::mem::take(&mut self.raw), entries: std::mem::take(&mut self.entries) })
    }
}

/// One record of a chunk as stored: its key and its value, both raw.
pub type RawRecord = (Vec<u8>, Vec<u8>);

/// The records of a raw chunk, checked for framing.
pub fn decode_chunk(raw: &[u8]) -> Result<Vec<RawRecord>, String> {
    let mut records = Vec::new();
    let mut at = 0usize;
    let field = |at: &mut usize| -> Result<Vec<u8>, String> {
        let len_bytes = raw.get(*at..*at + 4).ok_or("chunk ends inside a length")?;
        let len = u32::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let bytes = raw.get(*at + 4..*at + 4 + len).ok_or("chunk ends inside a field")?.to_vec();
        *at += 4 + len;
        Ok(bytes)
    };
    while at < raw.len() {
        let key = field(&mut at)?;
        let value = field(&mut at)?;
        // Records carry their version first; outcome metadata (`\0\0` keys) may be empty.
        if !key.starts_with(&[0, 0]) && value.len() < 8 {
            return Err("a stored value is shorter than its version".into());
        }
        records.push((key, value));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            namespace: "ns".into(),
            partition: 3,
            partitions: 16,
            log: "embedded:test/ns#1".into(),
            applied_next: 42,
            applied_entries: 42,
            skipped_entries: 1,
            record_count: 7,
            meta_entries: 0,
            not_applied_from: 0,
            state_hash: "ab".repeat(32),
            created_unix_ms: 1,
            chunks: vec![ChunkRef { hash: "cd".repeat(32), compressed_bytes: 10, raw_bytes: 20, entries: 7 }],
            checksum: String::new(),
        }
    }

    #[test]
    fn sealed_manifests_verify_and_tampering_is_detected() {
        let sealed = manifest().seal();
        let opened = Manifest::open(&sealed).unwrap();
        assert_eq!(opened.applied_next, 42);
        let tampered = String::from_utf8(sealed.clone()).unwrap().replace("\"applied_next\":42", "\"applied_next\":43");
        assert_ne!(tampered.as_bytes(), sealed.as_slice());
        assert!(Manifest::open(tampered.as_bytes()).unwrap_err().contains("checksum"));
        assert!(Manifest::open(&sealed[..sealed.len() / 2]).unwrap_err().contains("not valid"));
        let old = String::from_utf8(sealed).unwrap().replace("\"format\":2", "\"format\":1");
        assert!(Manifest::open(old.as_bytes()).unwrap_err().contains("format 1 carries no write ids"));
    }

    #[test]
    fn chunks_round_trip_and_boundaries_depend_on_content_only() {
        let records: Vec<(Vec<u8>, Vec<u8>)> =
            (0..5000u32).map(|i| (format!("key-{i:06}").into_bytes(), [&7u64.to_le_bytes()[..], b"\"v\""].concat())).collect();
        let cut = |records: &[(Vec<u8>, Vec<u8>)]| {
            let mut chunker = Chunker::default();
            let mut chunks: Vec<Vec<u8>> = records.iter().filter_map(|(k, v)| chunker.push(k, v)).map(|c| c.raw).collect();
            chunks.extend(chunker.finish().map(|c| c.raw));
            chunks
        };
        let chunks = cut(&records);
        assert!(chunks.len() > 3, "{} chunks", chunks.len());
        let decoded: Vec<(Vec<u8>, Vec<u8>)> = chunks.iter().flat_map(|c| decode_chunk(c).unwrap()).collect();
        assert_eq!(decoded, records);
        // Change one record in the middle: only its chunk changes.
        let mut changed = records.clone();
        changed[2500].1 = [&9u64.to_le_bytes()[..], b"\"w\""].concat();
        let changed_chunks = cut(&changed);
        let differing = chunks.iter().zip(&changed_chunks).filter(|(a, b)| a != b).count();
        assert_eq!((chunks.len(), differing), (changed_chunks.len(), 1));
        assert!(decode_chunk(&chunks[0][..chunks[0].len() - 1]).is_err(), "a cut chunk is detected");
    }
}
