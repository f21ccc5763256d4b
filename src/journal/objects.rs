//! The journal in object storage (issue 19): every journaled write is also
//! put in object storage before it is acknowledged, so a node whose disk is
//! lost loses none — another node finds its journal there and sequences it.
//!
//! Layout under the store's root (the snapshot store's):
//!
//! ```text
//! tern/journal/<journal id>/entries/<seq:020>   one object per group commit (format below)
//! tern/journal/<journal id>/lease.json          {"node", "renewed_at_ms", "released", "seq_floor"}: the owner is alive,
//!                                               and per lane what it released (see `lease`)
//! tern/journal/<journal id>/claim.json          {"by", "at_ms"}: another node is replaying it
//! ```
//!
//! A journal id is made at a journal's first open and kept in its directory,
//! so it names one journal, not one node: a node whose data directory is
//! lost starts a new journal, and the old one's lease stops being renewed.
//!
//! **Group commit.** Appends queue to one uploader task; it takes what is
//! queued (at most `GROUP_ENTRIES_MAX` entries, `GROUP_BYTES_MAX` bytes),
//! puts it as one object and answers every append in it. Sequence numbers
//! grow per journal, so listing a folder gives the journal's order, and a
//! journal never uses one twice, across restarts too: each open reserves
//! `SEQS_PER_RESERVATION` numbers past the highest listed and past the last
//! reservation (kept in `SEQ_FLOOR_FILE` in the journal's directory, and in
//! the lease's `seq_floor` should that file be gone). An object's name
//! thus names one content for ever, and a node replaying a lost journal
//! deletes exactly the objects it read (issue 36, simulation seed 82757: an
//! owner that had deleted all its objects restarted, numbered from 0 again,
//! and a claimer that had listed the old object 0 deleted the new one).
//!
//! **Deletion.** The owner deletes an object once every entry in it was
//! released by the local journal (seen applied). The oldest go as they
//! are: each lane's entries are in objects in order, so what is left holds
//! each lane from its lowest offset on with no gap. One above an object
//! that stays (a stuck entry of another lane) goes only once the lease
//! holds marks past its entries (`lease`): a claim skips what is below
//! them and never sees the gap it leaves (review of issue 36: deleting it
//! under older marks left a gap a claim stopped at). A put that failed is
//! noted as an object all the same (it may have been stored). A node
//! replaying a lost journal deletes the objects it listed (the oldest)
//! once it saw their entries applied. Never before.
//!
//! **Format** of an entries object: `MAGIC`, `u32` format version, `u32`
//! count, then per entry `u16` namespace length, namespace, `u32`
//! partitions, `u32` partition, `u64` local journal offset, `u32` payload
//! length, payload (the mutation as the log carries it); then the BLAKE3
//! hash of everything before it. All integers little-endian. A reader
//! checks the hash and every length before it trusts an entry.
//!
//! Owns: the objects' layout and format, the uploader, the lease. Never:
//! appends to the log or decides what was applied (the node does).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot};

mod lease;
use lease::LeaseKeeper;

const MAGIC: &[u8; 8] = b"TERNJRNL";
/// The file in a journal's directory holding the lowest object sequence
/// number its next open may use.
pub const SEQ_FLOOR_FILE: &str = "objects-seq-floor";
/// Object sequence numbers reserved at once (one per group commit: at
/// 10,000 puts a second, 5 days; past them the uploader reserves more).
/// Opens that reserve fit 2^32 − 1 times in a u64.
const SEQS_PER_RESERVATION: u64 = 1 << 32;
const FORMAT_VERSION: u32 = 1;
/// Uploaded objects not yet deleted: seq → per (namespace, partition) the
/// highest local journal offset in it.
type Uploaded = Arc<Mutex<BTreeMap<u64, Vec<((String, u32), u64)>>>>;

/// One group commit's object holds at most this many entries …
const GROUP_ENTRIES_MAX: usize = 4096;
/// … and about this many bytes (an entry is at most one mutation, 5 MiB).
const GROUP_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Entries whose object put failed, carried into the next object (so the
/// objects never miss an entry a later one holds: a node replaying them
/// applies a partition's entries in journal order, with no gap). At the
/// bound, journaled writes are refused until object storage takes them.
const CARRIED_ENTRIES_MAX: usize = 2048;
/// … and this many bytes of them (an object then stays far below
/// `OBJECT_BYTES_MAX`: the carry, plus a group, plus one entry each).
const CARRIED_BYTES_MAX: usize = GROUP_BYTES_MAX;
/// How often entries carried from a failed put are put again while no new
/// entry comes (at the bound none can: they are refused).
const CARRY_RETRY: Duration = Duration::from_secs(1);
/// Appends waiting for the uploader; at the bound an append waits.
const UPLOADS_QUEUED_MAX: usize = 65_536;
/// Largest entries object read back (a group commit is ≤ ~13 MiB).
const OBJECT_BYTES_MAX: usize = 64 * 1024 * 1024;
const HASH_BYTES: usize = 32;

/// What the uploader reads from the local journal (`journal::local`): the
/// entries an append did not hand it in order — two appends that reached
/// it in the other order, an append cancelled after the local journal took
/// its entry (its client went away), or one that timed out there — so that
/// the objects hold each lane's entries in journal order with none missing
/// between two (issue 36, review of the journal's objects: an entry whose
/// put failed after a later one's succeeded, or that was never handed over,
/// was a gap: a claim appended nothing past it, and the acknowledged writes
/// after it were never applied once the owner was lost; or a claim started
/// its lane past it, and the owner, back, had it dropped as a repeat).
pub trait LocalEntries: Send + Sync + 'static {
    /// Below this, every entry of `ns`/`partition` is released (seen
    /// applied): no object needs it.
    fn released_below(&self, ns: &str, partition: u32) -> u64;
    /// Every lane's released mark (lanes with none may be left out).
    fn released_marks(&self) -> Vec<LaneMark>;
    /// At most `count_max` entries of `ns`/`partition` (of `partitions`) from `from`, in order.
    fn read(
        &self,
        ns: &str,
        partitions: u32,
        partition: u32,
        from: u64,
        count_max: usize,
    ) -> futures::future::BoxFuture<'_, Result<Vec<Entry>, String>>;
}

/// The owner's local journal, as its objects see it.
pub struct LocalJournal {
    /// Its directory: where the object sequence numbers reserved are kept.
    pub dir: std::path::PathBuf,
    /// Its entries and released marks.
    pub entries: Arc<dyn LocalEntries>,
}

#[cfg(test)]
impl LocalJournal {
    /// In `dir`, with no entries to read (appends come in order).
    pub(crate) fn for_test(dir: &std::path::Path) -> LocalJournal {
        LocalJournal { dir: dir.to_path_buf(), entries: Arc::new(FakeLocal::default()) }
    }
}

/// Outcomes kept for entries put before their own append reached the
/// uploader (read from the local journal), until it comes or the entry is
/// released; past the bound the oldest are forgotten (such an append is
/// then answered as not known to be in object storage: 503, applied all
/// the same).
const SETTLED_MAX: usize = 65_536;

/// One journaled write, as kept in object storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub ns: String,
    pub partitions: u32,
    pub partition: u32,
    /// Where the owner's local journal has it.
    pub offset: u64,
    /// The mutation, encoded as the log carries it.
    pub payload: Bytes,
}

/// The owner's proof of life: renewed while it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub node: String,
    pub renewed_at_ms: u64,
    /// The owner's released marks: every entry below is applied. Written
    /// before the owner leaves anything below them out of its objects
    /// (`lease`). An entry carried from a failed put lives only in memory;
    /// released before a restart, it is in no object, and older objects not
    /// yet deleted then hold a lane with a gap that loses nothing (found by
    /// the simulation, seed 18929: a claimer refused such a journal for
    /// ever). A claim skips what is below them (`node::claims`).
    /// Absent in a lease of an older version: nothing skipped.
    #[serde(default)]
    pub released: Vec<LaneMark>,
    /// Past the object sequence numbers the owner reserved: an open starts
    /// at least here, even if its own record of them (`SEQ_FLOOR_FILE`) is
    /// gone. 0 in a lease of an older version.
    #[serde(default)]
    pub seq_floor: u64,
}

/// Entries of `ns`/`partition` below `below` are released (applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneMark {
    pub ns: String,
    pub partition: u32,
    pub below: u64,
}

/// A node replaying another's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claim {
    pub by: String,
    pub at_ms: u64,
}

fn store_error(e: impl std::fmt::Display) -> String {
    format!("object storage: {e}")
}

/// Milliseconds since the Unix epoch (leases compare wall clocks of nodes:
/// the claim delay must exceed their skew).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The journals in one object store: layout and format, for the owner and
/// for a node replaying a lost journal.
#[derive(Clone)]
pub struct JournalObjects {
    store: Arc<dyn ObjectStore>,
    /// `<root>/tern/journal`
    root: ObjectPath,
}

impl std::fmt::Debug for JournalObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JournalObjects({} at {:?})", self.store, self.root.as_ref())
    }
}

impl JournalObjects {
    pub fn new(store: Arc<dyn ObjectStore>, root: &ObjectPath) -> JournalObjects {
        JournalObjects { store, root: root.clone().join("tern").join("journal") }
    }

    fn folder(&self, journal_id: &str) -> ObjectPath {
        self.root.clone().join(journal_id)
    }

    fn entries_path(&self, journal_id: &str, seq: u64) -> ObjectPath {
        self.folder(journal_id).join("entries").join(format!("{seq:020}"))
    }

    fn lease_path(&self, journal_id: &str) -> ObjectPath {
        self.folder(journal_id).join("lease.json")
    }

    fn claim_path(&self, journal_id: &str) -> ObjectPath {
        self.folder(journal_id).join("claim.json")
    }

    /// Every journal id with a folder.
    pub async fn journals(&self) -> Result<Vec<String>, String> {
        let listed = self.store.list_with_delimiter(Some(&self.root)).await.map_err(store_error)?;
        Ok(listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_string)).collect())
    }

    /// The entries objects of a journal, in journal order: (seq, path).
    pub async fn entries(&self, journal_id: &str) -> Result<Vec<(u64, ObjectPath)>, String> {
        let prefix = self.folder(journal_id).join("entries");
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await.map_err(store_error)?;
        let mut out: Vec<(u64, ObjectPath)> =
            objects.into_iter().filter_map(|o| o.location.filename().and_then(|n| n.parse().ok()).map(|seq| (seq, o.location.clone()))).collect();
        out.sort_by_key(|(seq, _)| *seq);
        Ok(out)
    }

    pub async fn read_entries(&self, path: &ObjectPath) -> Result<Vec<Entry>, String> {
        self.read_object(path).await?
    }

    /// An entries object read back: Ok(its entries), or Ok(Err(why it is
    /// damaged: larger than an object may be, a hash or a length that does
    /// not match)), which reading again will not change; Err: the store failed.
    pub async fn read_object(&self, path: &ObjectPath) -> Result<Result<Vec<Entry>, String>, String> {
        let got = self.store.get(path).await.map_err(store_error)?;
        if got.meta.size > OBJECT_BYTES_MAX as u64 {
            return Ok(Err(format!("{path}: {} bytes, more than a journal object may hold ({OBJECT_BYTES_MAX})", got.meta.size)));
        }
        let bytes = got.bytes().await.map_err(store_error)?;
        Ok(decode(&bytes).map_err(|e| format!("{path}: {e}")))
    }

    pub async fn delete(&self, path: &ObjectPath) -> Result<(), String> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(e)),
        }
    }

    async fn put(&self, path: &ObjectPath, bytes: Bytes) -> Result<(), String> {
        self.store.put(path, PutPayload::from(bytes)).await.map(|_| ()).map_err(store_error)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &ObjectPath) -> Result<Option<T>, String> {
        match self.store.get(path).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(store_error)?;
                serde_json::from_slice(&bytes).map(Some).map_err(|e| format!("{path}: {e}"))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error(e)),
        }
    }

    pub async fn lease(&self, journal_id: &str) -> Result<Option<Lease>, String> {
        self.get_json(&self.lease_path(journal_id)).await
    }

    pub async fn renew_lease(&self, journal_id: &str, node: &str, released: &[LaneMark], seq_floor: u64) -> Result<(), String> {
        let lease = Lease { node: node.to_string(), renewed_at_ms: now_ms(), released: released.to_vec(), seq_floor };
        self.put(&self.lease_path(journal_id), Bytes::from(serde_json::to_vec(&lease).expect("serializes"))).await
    }

    /// Claims the journal for replay by `by`: when no one claimed it, or the
    /// claim is older than `stale_after` (its claimer stopped). Returns
    /// whether this call claimed it. Two nodes may both believe they did
    /// (a store without conditional puts, or a race on a stale claim): a
    /// journal replayed twice is applied once, so the claim only saves work.
    pub async fn claim(&self, journal_id: &str, by: &str, stale_after: Duration) -> Result<bool, String> {
        let path = self.claim_path(journal_id);
        let claim = Bytes::from(serde_json::to_vec(&Claim { by: by.to_string(), at_ms: now_ms() }).expect("serializes"));
        let create = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&path, PutPayload::from(claim.clone()), create).await {
            Ok(_) => return Ok(true),
            // Claimed already, or no conditional puts here: look, then
            // write (a race only doubles work).
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::NotImplemented { .. }) => {}
            Err(e) => return Err(store_error(e)),
        }
        let fresh = |c: &Claim| now_ms().saturating_sub(c.at_ms) < stale_after.as_millis() as u64;
        if self.get_json::<Claim>(&path).await?.is_some_and(|c| c.by != by && fresh(&c)) {
            return Ok(false);
        }
        self.put(&path, claim).await?;
        Ok(true)
    }

    /// Withdraws a claim (its owner came back): the journal's objects and lease stay.
    pub async fn unclaim(&self, journal_id: &str) -> Result<(), String> {
        self.delete(&self.claim_path(journal_id)).await
    }

    /// Removes a replayed journal's claim, and its lease unless the lease
    /// was written since the claimer read it (`seen`, None: there was
    /// none; compared whole, not by its millisecond alone): an owner that came back keeps its
    /// lease, whose released marks hide the gaps a pass or a restart's lost
    /// carry left (review of issue 36: a claim after the lease went saw a
    /// gap). A write in the instant between this read and the delete is
    /// lost until the owner's next one (its next pass or renewal, within
    /// `lease_renew`); scans claim a journal without a lease only once it
    /// stayed without one for `journal_claim_after` (`node::claims`).
    pub async fn retire(&self, journal_id: &str, seen: Option<&Lease>) -> Result<(), String> {
        self.unclaim(journal_id).await?;
        if let Some(lease) = self.lease(journal_id).await?.filter(|lease| Some(lease) != seen) {
            tracing::info!(
                journal_id,
                renewed_at_ms = lease.renewed_at_ms,
                "a replayed journal's owner wrote its lease since: it is back, and keeps it"
            );
            return Ok(());
        }
        self.delete(&self.lease_path(journal_id)).await
    }
}

/// Encodes one group commit (see the module doc).
pub fn encode(entries: &[Entry]) -> Bytes {
    let size: usize = entries.iter().map(|e| 26 + e.ns.len() + e.payload.len()).sum();
    let mut out = BytesMut::with_capacity(16 + size + HASH_BYTES);
    out.put_slice(MAGIC);
    out.put_u32_le(FORMAT_VERSION);
    out.put_u32_le(u32::try_from(entries.len()).expect("a group commit is bounded"));
    for entry in entries {
        assert!(entry.partition < entry.partitions && entry.ns.len() <= u16::MAX as usize, "a valid entry is written");
        out.put_u16_le(entry.ns.len() as u16);
        out.put_slice(entry.ns.as_bytes());
        out.put_u32_le(entry.partitions);
        out.put_u32_le(entry.partition);
        out.put_u64_le(entry.offset);
        out.put_u32_le(u32::try_from(entry.payload.len()).expect("an entry is one mutation"));
        out.put_slice(&entry.payload);
    }
    let hash = blake3::hash(&out);
    out.put_slice(hash.as_bytes());
    out.freeze()
}

/// Decodes an entries object, checking its hash and every length.
pub fn decode(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    if bytes.len() < MAGIC.len() + 8 + HASH_BYTES || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a journal object".into());
    }
    let (body, hash) = bytes.split_at(bytes.len() - HASH_BYTES);
    if blake3::hash(body).as_bytes() != hash {
        return Err("its hash does not match: the object is damaged".into());
    }
    let mut at = &body[MAGIC.len()..];
    let version = at.get_u32_le();
    if version != FORMAT_VERSION {
        return Err(format!("format version {version}; this Tern reads {FORMAT_VERSION}"));
    }
    let count = at.get_u32_le() as usize;
    let mut entries = Vec::with_capacity(count.min(GROUP_ENTRIES_MAX));
    for index in 0..count {
        let short = || format!("entry {index} is cut short");
        if at.remaining() < 2 {
            return Err(short());
        }
        let ns_len = at.get_u16_le() as usize;
        if at.remaining() < ns_len + 20 {
            return Err(short());
        }
        let ns = std::str::from_utf8(&at[..ns_len]).map_err(|_| format!("entry {index}: the namespace is not UTF-8"))?.to_string();
        at.advance(ns_len);
        let (partitions, partition, offset) = (at.get_u32_le(), at.get_u32_le(), at.get_u64_le());
        let payload_len = at.get_u32_le() as usize;
        if at.remaining() < payload_len || partition >= partitions {
            return Err(format!("entry {index} is cut short or names partition {partition} of {partitions}"));
        }
        let payload = Bytes::copy_from_slice(&at[..payload_len]);
        at.advance(payload_len);
        entries.push(Entry { ns, partitions, partition, offset, payload });
    }
    if at.has_remaining() {
        return Err(format!("{} bytes after the last entry", at.remaining()));
    }
    Ok(entries)
}

/// What the uploader carries into its next put, for `refuses`.
#[derive(Default)]
struct Carried {
    entries: std::sync::atomic::AtomicUsize,
    bytes: std::sync::atomic::AtomicUsize,
}

/// An append waiting for its group commit.
struct Upload {
    entry: Entry,
    done: oneshot::Sender<Result<(), String>>,
}

/// This node's journal in object storage: the uploader, the lease, and the
/// objects not yet deleted.
pub struct ObjectJournal {
    objects: JournalObjects,
    journal_id: String,
    queue: mpsc::Sender<Upload>,
    /// Uploaded objects not deleted: seq → per (namespace, partition) the
    /// highest local journal offset in it.
    uploaded: Uploaded,
    /// Entries and bytes carried since the last put that failed (0: none failed).
    carried: Arc<Carried>,
    lease: Arc<LeaseKeeper>,
    local: Arc<dyn LocalEntries>,
    /// The released marks at open (the local journal's start may be past
    /// its marks): what is below is released too.
    floor: HashMap<LaneKey, u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ObjectJournal {
    /// Starts this journal's uploader and lease (renewed every
    /// `lease_renew`), after reading what its folder already holds (objects
    /// of before a restart: deleted once their entries are released).
    /// `unreleased`: the local journal's entries not yet released, put
    /// first (again, if an object has them already): a put that failed
    /// before a restart carried entries that only the local journal has,
    /// and the objects must never miss one a later object holds.
    /// `released`: the local journal's released marks at open (each lane's
    /// mark in the lease is at least this, `Lease::released`): what a
    /// restart's lost carry may miss below them.
    /// `local`: the local journal's directory, where the sequence numbers
    /// reserved are kept (`SEQ_FLOOR_FILE`), and its entries.
    pub async fn open(
        objects: JournalObjects,
        journal_id: &str,
        node: &str,
        lease_renew: Duration,
        unreleased: Vec<Entry>,
        released: Vec<LaneMark>,
        local: LocalJournal,
    ) -> Result<ObjectJournal, String> {
        let dir = local.dir.as_path();
        // Read first: a damaged floor is refused before anything else is done.
        let local_floor = read_seq_floor(dir)?;
        let lease_floor = objects.lease(journal_id).await?.map_or(0, |lease| lease.seq_floor);
        let mut uploaded = BTreeMap::new();
        let mut listed_next = 0;
        for (seq, path) in objects.entries(journal_id).await? {
            let entries = objects.read_entries(&path).await?;
            uploaded.insert(seq, highest_offsets(&entries));
            listed_next = seq + 1;
        }
        let next_seq = listed_next.max(local_floor).max(lease_floor);
        let seq_end = reserve_seqs(dir, next_seq)?;
        let reserved_end = Arc::new(AtomicU64::new(seq_end));
        let floor = released.iter().map(|mark| ((mark.ns.clone(), mark.partition), mark.below)).collect();
        let lease = Arc::new(LeaseKeeper::new(objects.clone(), journal_id, node, local.entries.clone(), released, reserved_end.clone()));
        lease.renew().await?;
        let uploaded = Arc::new(Mutex::new(uploaded));
        let (queue, receiver) = mpsc::channel(UPLOADS_QUEUED_MAX);
        let carried = Arc::new(Carried::default());
        let seqs = Seqs { dir: dir.to_path_buf(), range: next_seq..seq_end, reserved_end: reserved_end.clone() };
        let uploader = Uploader {
            objects: objects.clone(),
            journal_id: journal_id.to_string(),
            seqs,
            uploaded: uploaded.clone(),
            carried: carried.clone(),
            local: local.entries.clone(),
            lease: lease.clone(),
            lease_needs: HashMap::new(),
            next: lanes_next(&unreleased),
            carry: unreleased,
            settled: HashMap::new(),
            held: None,
            carry_split: false,
        };
        let uploader = tokio::spawn(uploader.run(receiver));
        let renewing = lease.clone();
        let renewer = tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease_renew).await;
                if let Err(e) = renewing.renew().await {
                    tracing::warn!(error = %e, "renewing the journal's lease failed; retrying");
                }
            }
        });
        Ok(ObjectJournal {
            objects,
            journal_id: journal_id.to_string(),
            queue,
            uploaded,
            carried,
            lease,
            local: local.entries,
            floor,
            tasks: vec![uploader, renewer],
        })
    }

    pub fn journal_id(&self) -> &str {
        &self.journal_id
    }

    /// Why a new journaled write must be refused before it is journaled:
    /// object storage has not taken the last `CARRIED_ENTRIES_MAX` ones.
    pub fn refuses(&self) -> Option<String> {
        let entries = self.carried.entries.load(std::sync::atomic::Ordering::Relaxed);
        let bytes = self.carried.bytes.load(std::sync::atomic::Ordering::Relaxed);
        (entries >= CARRIED_ENTRIES_MAX || bytes >= CARRIED_BYTES_MAX).then(|| {
            format!(
                "object storage has not taken the last {entries} journaled writes, {bytes} bytes (bounds: \
                 {CARRIED_ENTRIES_MAX} writes, {CARRIED_BYTES_MAX} bytes)"
            )
        })
    }

    /// Returns once `entry` is in object storage (its group commit's object
    /// put). Err: that put failed; the entry is carried into the next one.
    pub async fn append(&self, entry: Entry) -> Result<(), String> {
        let (done, answer) = oneshot::channel();
        self.queue.send(Upload { entry, done }).await.map_err(|_| "the journal's uploader stopped".to_string())?;
        answer.await.map_err(|_| "the journal's uploader stopped".to_string())?
    }

    /// Deletes the objects whose every entry the local journal released
    /// (seen applied). The oldest go as they are (what is left holds each
    /// lane from its lowest offset on, no gap); one above an object that
    /// stays (an entry of another lane not applied yet) goes only once the
    /// lease holds marks past its entries (`lease`), so a claim never sees
    /// the gap it leaves, and no stuck entry keeps newer objects for ever.
    pub async fn delete_released(&self) -> Result<usize, String> {
        // Read before the objects' lock (the marks' lock is another's).
        let mut released = self.floor.clone();
        for mark in self.local.released_marks() {
            let at = released.entry((mark.ns, mark.partition)).or_insert(0);
            *at = (*at).max(mark.below);
        }
        let fully_released = |lanes: &[(LaneKey, u64)]| lanes.iter().all(|(lane, highest)| *highest < released.get(lane).copied().unwrap_or(0));
        // In sequence order: the first `prefix` of them have no object that stays below.
        let (mut deletable, mut prefix, mut needs) = (Vec::new(), 0, HashMap::<LaneKey, u64>::new());
        let mut one_stays_below = false;
        for (seq, lanes) in self.uploaded.lock().iter() {
            if !fully_released(lanes) {
                one_stays_below = true;
                continue;
            }
            if one_stays_below {
                for (lane, highest) in lanes {
                    let need = needs.entry(lane.clone()).or_insert(0);
                    *need = (*need).max(highest + 1);
                }
            } else {
                prefix += 1;
            }
            deletable.push(*seq);
        }
        let mut covered = Ok(());
        if !needs.is_empty() {
            covered = self.lease.cover(&needs.into_iter().collect::<Vec<_>>()).await;
            if covered.is_err() {
                deletable.truncate(prefix);
            }
        }
        for seq in &deletable {
            self.objects.delete(&self.objects.entries_path(&self.journal_id, *seq)).await?;
            self.uploaded.lock().remove(seq);
        }
        covered.map(|()| deletable.len())
    }

    /// Objects uploaded and not deleted.
    pub fn objects_held(&self) -> usize {
        self.uploaded.lock().len()
    }
}

impl Drop for ObjectJournal {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The lowest object sequence number this open may use, as the last open
/// left it (0: none did). A damaged file is refused: a guess could reuse a
/// number.
pub(super) fn read_seq_floor(dir: &std::path::Path) -> Result<u64, String> {
    let path = dir.join(SEQ_FLOOR_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| format!("{} holds {text:?}, not an object sequence number", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// The object sequence numbers an open reserved, and where to reserve more.
struct Seqs {
    dir: std::path::PathBuf,
    range: std::ops::Range<u64>,
    /// The end of the reservation, for the lease (`Lease::seq_floor`).
    reserved_end: Arc<AtomicU64>,
}

impl Seqs {
    /// The next number; past the reservation, reserves `SEQS_PER_RESERVATION` more first.
    fn next(&mut self) -> Result<u64, String> {
        if self.range.is_empty() {
            let end = reserve_seqs(&self.dir, self.range.end)?;
            self.range = self.range.end..end;
            self.reserved_end.store(end, Ordering::Relaxed);
        }
        Ok(self.range.next().expect("a reservation is never empty"))
    }
}

/// Reserves `SEQS_PER_RESERVATION` numbers from `next_seq`: the next open starts
/// past them (written atomically before any is used). Returns the end of
/// the reservation.
fn reserve_seqs(dir: &std::path::Path, next_seq: u64) -> Result<u64, String> {
    let end = next_seq.checked_add(SEQS_PER_RESERVATION).ok_or_else(|| format!("the journal's object sequence numbers are used up ({next_seq})"))?;
    let path = dir.join(SEQ_FLOOR_FILE);
    crate::log::embedded::segments::write_atomically(&path, end.to_string().as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    debug_assert_eq!(read_seq_floor(dir), Ok(end), "the floor reads back as written");
    Ok(end)
}

fn highest_offsets(entries: &[Entry]) -> Vec<((String, u32), u64)> {
    let mut highest: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for e in entries {
        let at = highest.entry((e.ns.clone(), e.partition)).or_insert(e.offset);
        *at = (*at).max(e.offset);
    }
    highest.into_iter().collect()
}

/// A lane of the local journal: (namespace, partition).
type LaneKey = (String, u32);

/// Per lane, past the last of `entries`.
fn lanes_next(entries: &[Entry]) -> HashMap<LaneKey, u64> {
    let mut next = HashMap::new();
    for entry in entries {
        let at = next.entry((entry.ns.clone(), entry.partition)).or_insert(0);
        *at = (*at).max(entry.offset + 1);
    }
    next
}

/// The uploader: takes what is queued, puts it as one object (after the
/// entries of the last put that failed, in journal order), answers each
/// append. Each lane's entries go into objects in journal order, none
/// missing between two (`LocalEntries`). Entries carried from a failed
/// put are put again every `CARRY_RETRY` even when nothing new comes.
struct Uploader {
    objects: JournalObjects,
    journal_id: String,
    seqs: Seqs,
    uploaded: Uploaded,
    carried: Arc<Carried>,
    local: Arc<dyn LocalEntries>,
    lease: Arc<LeaseKeeper>,
    /// Per lane, released entries passed (`Uploader::place`) below this:
    /// the lease must say so before an object past them is put (at most
    /// one per lane the uploader knows).
    lease_needs: HashMap<LaneKey, u64>,
    /// Entries of the last put that failed: first in the next object.
    carry: Vec<Entry>,
    /// Per lane, the next offset an object must hold: every entry below is
    /// in an object put, carried, or released.
    next: HashMap<LaneKey, u64>,
    /// Entries put (or carried) before their own append reached the
    /// uploader: the outcome to answer it with (bounded: `SETTLED_MAX`).
    settled: HashMap<LaneKey, BTreeMap<u64, Result<(), String>>>,
    /// An append whose lane's missing entries did not all fit in the last
    /// object, or that came while a carry too large for one object was
    /// put: placed first in the next.
    held: Option<Upload>,
    /// The carry was split to fit an object: the rest goes without waiting.
    carry_split: bool,
}

/// One object being gathered.
#[derive(Default)]
struct Group {
    entries: Vec<Entry>,
    bytes: usize,
    /// Appends answered with this object's put.
    answers: Vec<oneshot::Sender<Result<(), String>>>,
    /// Entries read from the local journal for it (their appends not come yet).
    filled: Vec<(LaneKey, u64)>,
}

impl Group {
    fn push(&mut self, entry: Entry) {
        self.bytes += entry.payload.len();
        self.entries.push(entry);
    }

    fn has_room(&self) -> bool {
        self.entries.len() < GROUP_ENTRIES_MAX && self.bytes < GROUP_BYTES_MAX
    }
}

impl Uploader {
    async fn run(mut self, mut queue: mpsc::Receiver<Upload>) {
        loop {
            note_carried(&self.carried, &self.carry);
            let first = match self.held.take() {
                Some(held) => Some(held),
                // The rest of a carry too large for one object goes on at once.
                None if std::mem::take(&mut self.carry_split) => None,
                None => tokio::select! {
                    upload = queue.recv() => match upload {
                        Some(upload) => Some(upload),
                        None => return,
                    },
                    _ = tokio::time::sleep(CARRY_RETRY), if !self.carry.is_empty() => None,
                },
            };
            let mut group = Group::default();
            let mut carry = std::mem::take(&mut self.carry).into_iter();
            for entry in carry.by_ref() {
                group.push(entry);
                if !group.has_room() {
                    break;
                }
            }
            // Within an object's bounds (a backlog put at open may be far
            // larger than one object read back, `OBJECT_BYTES_MAX`): the rest
            // first in the next object, and any append after it.
            self.carry = carry.collect();
            if !self.carry.is_empty() {
                self.carry_split = true;
                self.held = first;
                self.put(group).await;
                continue;
            }
            if let Some(first) = first {
                self.place(first, &mut group).await;
                while group.has_room() && self.held.is_none() {
                    let Ok(next) = queue.try_recv() else { break };
                    self.place(next, &mut group).await;
                }
            }
            self.put(group).await;
            self.forget_settled();
        }
    }

    /// Places one append's entry in `group`, after its lane's entries the
    /// objects do not hold yet (read from the local journal), or answers it
    /// at once when its entry was placed before.
    async fn place(&mut self, upload: Upload, group: &mut Group) {
        let (ns, partition, offset) = (upload.entry.ns.clone(), upload.entry.partition, upload.entry.offset);
        let lane = (ns.clone(), partition);
        let released = self.local.released_below(&ns, partition);
        // A lane first seen starts at its released mark (what is below was
        // in objects, or is below the marks the lease keeps). Later a lane
        // moves only by what is placed, released or not: objects never
        // skip an entry of their lane.
        let next = *self.next.entry(lane.clone()).or_insert(released);
        if offset < next {
            return self.answer_placed_before(upload, &lane, released, group);
        }
        if offset > next {
            let from = next;
            let room = GROUP_ENTRIES_MAX.saturating_sub(group.entries.len()).max(1);
            let count = usize::try_from(offset - from).unwrap_or(usize::MAX).min(room);
            let fill = match self.local.read(&ns, upload.entry.partitions, partition, from, count).await {
                Ok(fill) if fill.first().is_some_and(|e| e.offset == from) => fill,
                Ok(fill) => {
                    let got = fill.first().map(|e| e.offset);
                    tracing::error!(ns, partition, from, ?got, "the local journal did not give the entries missing from object storage");
                    Vec::new()
                }
                Err(e) => {
                    tracing::error!(ns, partition, from, error = %e, "journal entries missing from object storage could not be read");
                    Vec::new()
                }
            };
            for (taken, entry) in fill.into_iter().enumerate() {
                // Within the gap, in order, and within the object's room (at least one entry).
                if entry.offset != self.next[&lane] || entry.offset >= offset || (taken > 0 && !group.has_room()) {
                    break;
                }
                self.next.insert(lane.clone(), entry.offset + 1);
                group.filled.push((lane.clone(), entry.offset));
                group.push(entry);
            }
            if self.next[&lane] == from && released > from {
                // Released entries gone from the local journal (its retention):
                // applied, so passed, once the lease says so (`put`): a claim's
                // plan skips them only below the lease's marks.
                tracing::warn!(ns, partition, from, released, "released journal entries could not be read for object storage; passed");
                self.next.insert(lane.clone(), released.min(offset));
                let need = self.lease_needs.entry(lane.clone()).or_insert(0);
                *need = (*need).max(released.min(offset));
                if released < offset {
                    self.held = Some(upload);
                    return;
                }
            } else if self.next[&lane] == from {
                // Nothing could be read: never put an entry after a missing one.
                let _ = upload
                    .done
                    .send(Err(format!("the journal's entries before offset {offset} of {ns}/{partition} could not be read for object storage")));
                return;
            }
            if self.next[&lane] < offset {
                // The rest of the gap goes first in the next object.
                self.held = Some(upload);
                return;
            }
        }
        assert_eq!(self.next[&lane], offset, "a lane's entries are placed in order");
        self.next.insert(lane, offset + 1);
        group.push(upload.entry);
        group.answers.push(upload.done);
    }

    /// An append whose entry was placed before it came (read from the local
    /// journal) or is released: answered with that put's outcome.
    fn answer_placed_before(&mut self, upload: Upload, lane: &LaneKey, released: u64, group: &mut Group) {
        let offset = upload.entry.offset;
        if offset < released {
            // Applied already: no object needs it.
            let _ = upload.done.send(Ok(()));
            return;
        }
        if let Some(at) = group.filled.iter().position(|filled| filled.0 == *lane && filled.1 == offset) {
            group.filled.swap_remove(at);
            group.answers.push(upload.done);
            return;
        }
        let outcome = self.settled.get_mut(lane).and_then(|lane| lane.remove(&offset));
        let outcome = outcome.unwrap_or_else(|| Err(format!("whether object storage took journal offset {offset} is no longer known")));
        let _ = upload.done.send(outcome);
    }

    /// Puts `group` as one object (if it holds anything) and answers its appends.
    async fn put(&mut self, group: Group) {
        if group.entries.is_empty() {
            return;
        }
        let encoded = encode(&group.entries);
        debug_assert_eq!(decode(&encoded).as_ref(), Ok(&group.entries), "an object reads back as written");
        // Passed entries are in no object: the lease says they are released first.
        let covered = match self.lease_needs.is_empty() {
            true => Ok(()),
            false => {
                let needs: Vec<(LaneKey, u64)> = self.lease_needs.iter().map(|(lane, below)| (lane.clone(), *below)).collect();
                self.lease.cover(&needs).await.map(|()| self.lease_needs.clear())
            }
        };
        // A failed put still uses its number: it may have been stored.
        let result = match covered.map(|()| self.seqs.next()) {
            Err(e) => Err(format!("the journal's lease was not renewed past released entries: {e}")),
            Ok(Ok(seq)) => {
                crate::metrics::JOURNAL_OBJECTS_PUT.inc();
                // Noted whatever the outcome: a put that failed may have been
                // stored, and an object left out here would stay below newer
                // ones deleted around it (review of issue 36). Deleting one
                // that is not there is done at once.
                self.uploaded.lock().insert(seq, highest_offsets(&group.entries));
                self.objects.put(&self.objects.entries_path(&self.journal_id, seq), encoded).await
            }
            Ok(Err(e)) => Err(format!("no object sequence number could be reserved: {e}")),
        };
        // What was read for appends not come yet (and what a carry holds of it) is told to them when they come.
        for (lane, offset) in group.filled {
            self.settled.entry(lane).or_default().insert(offset, result.clone());
        }
        for entry in &group.entries {
            if let Some(outcome) = self.settled.get_mut(&(entry.ns.clone(), entry.partition)).and_then(|lane| lane.get_mut(&entry.offset)) {
                *outcome = result.clone();
            }
        }
        for answer in group.answers {
            let _ = answer.send(result.clone());
        }
        if result.is_err() {
            // Carried, so no later object holds an entry this one missed.
            let rest = std::mem::take(&mut self.carry);
            self.carry = group.entries;
            self.carry.extend(rest);
        }
    }

    /// Forgets the outcomes of released entries, and the oldest past `SETTLED_MAX`.
    fn forget_settled(&mut self) {
        let local = &self.local;
        self.settled.retain(|(ns, partition), lane| {
            let released = local.released_below(ns, *partition);
            lane.retain(|offset, _| *offset >= released);
            !lane.is_empty()
        });
        let mut count: usize = self.settled.values().map(BTreeMap::len).sum();
        while count > SETTLED_MAX {
            for lane in self.settled.values_mut() {
                if count > SETTLED_MAX && lane.pop_first().is_some() {
                    count -= 1;
                }
            }
        }
    }
}

fn note_carried(carried: &Carried, carry: &[Entry]) {
    carried.entries.store(carry.len(), std::sync::atomic::Ordering::Relaxed);
    carried.bytes.store(carry.iter().map(|e| e.payload.len()).sum(), std::sync::atomic::Ordering::Relaxed);
}

/// The local journal as a test writes it: its entries, what is released, whether reads fail.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct FakeLocal {
    pub(crate) entries: Mutex<Vec<Entry>>,
    pub(crate) released: Mutex<HashMap<LaneKey, u64>>,
    pub(crate) reads_fail: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl LocalEntries for FakeLocal {
    fn released_below(&self, ns: &str, partition: u32) -> u64 {
        self.released.lock().get(&(ns.to_string(), partition)).copied().unwrap_or(0)
    }

    fn released_marks(&self) -> Vec<LaneMark> {
        self.released.lock().iter().map(|((ns, partition), below)| LaneMark { ns: ns.clone(), partition: *partition, below: *below }).collect()
    }

    fn read(&self, ns: &str, _: u32, partition: u32, from: u64, count_max: usize) -> futures::future::BoxFuture<'_, Result<Vec<Entry>, String>> {
        let fails = self.reads_fail.load(Ordering::Relaxed);
        let found: Vec<Entry> =
            self.entries.lock().iter().filter(|e| e.ns == ns && e.partition == partition && e.offset >= from).take(count_max).cloned().collect();
        Box::pin(async move {
            match fails {
                true => Err("the disk is gone".to_string()),
                false => Ok(found),
            }
        })
    }
}

/// Journal "j1" of node "n1", its sequence numbers kept in `dir`, its local entries `local`.
#[cfg(test)]
pub(crate) async fn open_j1(objects: &JournalObjects, dir: &std::path::Path, local: &Arc<FakeLocal>) -> Result<ObjectJournal, String> {
    let local = LocalJournal { dir: dir.into(), entries: local.clone() };
    ObjectJournal::open(objects.clone(), "j1", "n1", Duration::from_secs(60), Vec::new(), Vec::new(), local).await
}

/// Every entry of every object, in object order.
#[cfg(test)]
pub(crate) async fn held_offsets(objects: &JournalObjects) -> Vec<Vec<u64>> {
    let mut held = Vec::new();
    for (_, path) in objects.entries("j1").await.unwrap() {
        held.push(objects.read_entries(&path).await.unwrap().into_iter().map(|e| e.offset).collect());
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ns: &str, partition: u32, offset: u64, payload: &[u8]) -> Entry {
        Entry { ns: ns.into(), partitions: 4, partition, offset, payload: Bytes::copy_from_slice(payload) }
    }

    /// Review of issue 36: objects hold a lane's entries in journal order
    /// with none missing between two, whatever order (or whether) appends
    /// hand them over. Two appends that reach the uploader in the other
    /// order, and one whose client went away after the local journal took
    /// it, left a gap: a claim appended nothing past it (the acknowledged
    /// writes after it were never applied once the owner was lost), or
    /// started the lane past it. Failed before: the first object held [1]
    /// alone, and the last [4] without 3.
    #[tokio::test]
    async fn objects_hold_a_lane_in_order_whatever_order_appends_come_in() {
        let local_dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let local = Arc::new(FakeLocal::default());
        *local.entries.lock() = (0..5).map(|offset| entry("a", 0, offset, b"x")).collect();
        let journal = open_j1(&objects, local_dir.path(), &local).await.unwrap();
        // Entry 1 comes before entry 0: 0 is read from the local journal and put first.
        journal.append(entry("a", 0, 1, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await, vec![vec![0, 1]]);
        // Entry 0's own append, late: answered with the put that held it, nothing put again.
        journal.append(entry("a", 0, 0, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await, vec![vec![0, 1]]);
        // Entry 3's append never comes (cancelled); entry 2 is released (applied) meanwhile.
        local.released.lock().insert(("a".into(), 0), 3);
        journal.append(entry("a", 0, 4, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await, vec![vec![0, 1], vec![2, 3, 4]], "2 and 3 read: objects never skip an entry, released or not");
        // A released entry's late append is answered at once.
        journal.append(entry("a", 0, 2, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await.len(), 2);
        // An entry after one that cannot be read is refused, never put after a gap.
        local.entries.lock().extend((5..8).map(|offset| entry("a", 0, offset, b"x")));
        local.reads_fail.store(true, Ordering::Relaxed);
        let refused = journal.append(entry("a", 0, 6, b"x")).await.unwrap_err();
        assert!(refused.contains("before offset 6"), "{refused}");
        assert_eq!(held_offsets(&objects).await.len(), 2);
        local.reads_fail.store(false, Ordering::Relaxed);
        journal.append(entry("a", 0, 7, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await[2], vec![5, 6, 7]);
        // Released entries the local journal no longer has (its retention) are passed.
        local.released.lock().insert(("a".into(), 0), 10);
        journal.append(entry("a", 0, 10, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await[3], vec![10]);
        // Another lane is its own.
        journal.append(entry("a", 1, 0, b"x")).await.unwrap();
        assert_eq!(held_offsets(&objects).await[4], vec![0]);
    }

    #[test]
    fn objects_read_back_as_written_and_damage_is_found() {
        let entries = vec![entry("a", 0, 7, b"x"), entry("ünï", 3, 0, b""), entry("a", 0, 8, &[9; 1000])];
        let bytes = encode(&entries);
        assert_eq!(decode(&bytes).unwrap(), entries);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        for at in [0, 9, 20, bytes.len() - 1] {
            let mut damaged = bytes.to_vec();
            damaged[at] ^= 1;
            assert!(decode(&damaged).is_err(), "a flipped bit at {at} is found");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "a cut object is found");
        assert!(decode(b"").is_err());
    }

    #[tokio::test]
    async fn objects_are_deleted_only_once_every_entry_is_released() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let dir = tempfile::tempdir().unwrap();
        let local = Arc::new(FakeLocal::default());
        let journal = open_j1(&objects, dir.path(), &local).await.unwrap();
        journal.append(entry("a", 0, 0, b"0")).await.unwrap();
        journal.append(entry("a", 1, 0, b"1")).await.unwrap();
        assert_eq!(objects.entries("j1").await.unwrap().len(), 2);
        assert!(objects.lease("j1").await.unwrap().is_some_and(|l| l.node == "n1"));
        // Partition 0 released, partition 1 not: one object goes.
        local.released.lock().insert(("a".into(), 0), 1);
        let deleted = journal.delete_released().await.unwrap();
        assert_eq!((deleted, objects.entries("j1").await.unwrap().len()), (1, 1));
        let left = objects.read_entries(&objects.entries("j1").await.unwrap()[0].1).await.unwrap();
        assert_eq!(left, vec![entry("a", 1, 0, b"1")]);
        // A reopened journal knows the object and numbers on past what the last open reserved.
        drop(journal);
        *local.entries.lock() = vec![entry("a", 1, 0, b"1"), entry("a", 1, 1, b"2")];
        let journal = open_j1(&objects, dir.path(), &local).await.unwrap();
        assert_eq!(journal.objects_held(), 1);
        journal.append(entry("a", 1, 1, b"2")).await.unwrap();
        let seqs: Vec<u64> = objects.entries("j1").await.unwrap().iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, vec![1, SEQS_PER_RESERVATION]);
        local.released.lock().insert(("a".into(), 1), 2);
        assert_eq!(journal.delete_released().await.unwrap(), 2);
        assert!(objects.entries("j1").await.unwrap().is_empty());
        assert_eq!(objects.journals().await.unwrap(), vec!["j1".to_string()], "the lease stays while the owner runs");
    }

    /// Issue 36 (simulation seed 82757): an object's sequence number is
    /// never used twice by a journal. Its owner deleted every object (all
    /// released), restarted and numbered from 0 again, so a claimer that had
    /// listed the first object 0 deleted the new one, with an acknowledged
    /// write only it held. Failed before: the object after the restart was 0.
    #[tokio::test]
    async fn object_sequence_numbers_are_never_used_twice() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let local = Arc::new(FakeLocal::default());
        let open = || open_j1(&objects, dir.path(), &local);
        let mut seen = Vec::new();
        for offset in 0..3 {
            local.released.lock().insert(("a".into(), 0), offset);
            let journal = open().await.unwrap();
            journal.append(entry("a", 0, offset, b"x")).await.unwrap();
            let held = objects.entries("j1").await.unwrap();
            assert_eq!(held.len(), 1);
            seen.push(held[0].0);
            // Released and deleted: the folder is empty when it opens again.
            local.released.lock().insert(("a".into(), 0), offset + 1);
            assert_eq!(journal.delete_released().await.unwrap(), 1);
        }
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "numbers grow across opens: {seen:?}");
        // The floor file gone (an operator removed it): the lease's floor still holds.
        std::fs::remove_file(dir.path().join(SEQ_FLOOR_FILE)).unwrap();
        local.released.lock().insert(("a".into(), 0), 3);
        let journal = open().await.unwrap();
        journal.append(entry("a", 0, 3, b"x")).await.unwrap();
        let held = objects.entries("j1").await.unwrap();
        assert!(held[0].0 > seen[2], "{} after {seen:?}", held[0].0);
        drop(journal);
        // A damaged floor is refused, never guessed.
        std::fs::write(dir.path().join(SEQ_FLOOR_FILE), b"12x").unwrap();
        let refused = open().await.err().expect("refused");
        assert!(refused.contains(SEQ_FLOOR_FILE) && refused.contains("12x"), "{refused}");
    }

    /// Past its reservation, the uploader reserves more (written before use).
    #[test]
    fn sequence_numbers_past_the_reservation_are_reserved_first() {
        let dir = tempfile::tempdir().unwrap();
        let reserved_end = Arc::new(AtomicU64::new(6));
        let mut seqs = Seqs { dir: dir.path().to_path_buf(), range: 5..6, reserved_end: reserved_end.clone() };
        assert_eq!(seqs.next(), Ok(5));
        assert_eq!(read_seq_floor(dir.path()), Ok(0), "nothing reserved yet");
        assert_eq!(seqs.next(), Ok(6));
        assert_eq!(read_seq_floor(dir.path()), Ok(6 + SEQS_PER_RESERVATION));
        assert_eq!(reserved_end.load(Ordering::Relaxed), 6 + SEQS_PER_RESERVATION, "the lease is told");
        assert_eq!(seqs.next(), Ok(7));
    }

    /// Issue 36: an entry whose object put failed was in no object, while
    /// later entries were: a node replaying the lost journal would have
    /// applied them without it (and, applying in journal order, waited for
    /// it for ever). It is carried into the next object; past the bound,
    /// new journaled writes are refused before they are journaled. Failed
    /// before: the second object held only "b".
    #[tokio::test]
    async fn an_entry_whose_put_failed_goes_into_the_next_object() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let journal =
            ObjectJournal::open(objects.clone(), "j1", "n1", Duration::from_secs(60), Vec::new(), Vec::new(), LocalJournal::for_test(dir.path()))
                .await
                .unwrap();
        // A directory where object 0 goes: its put fails.
        let blocked = dir.path().join(objects.entries_path("j1", 0).as_ref());
        std::fs::create_dir_all(blocked.join("in-the-way")).unwrap();
        assert!(journal.append(entry("a", 0, 0, b"a")).await.is_err());
        assert_eq!(journal.refuses(), None, "one carried entry is within the bound");
        journal.append(entry("a", 0, 1, b"b")).await.unwrap();
        let held = objects.entries("j1").await.unwrap();
        assert_eq!(held.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), vec![1]);
        assert_eq!(journal.objects_held(), 2, "the failed put's object is noted too: it may have been stored");
        assert_eq!(objects.read_entries(&held[0].1).await.unwrap(), vec![entry("a", 0, 0, b"a"), entry("a", 0, 1, b"b")]);
        // Failing for good: refused once CARRIED_ENTRIES_MAX are carried
        // (the seqs past them are blocked too: the carry is put again every
        // CARRY_RETRY meanwhile).
        let block = |seq: u64| std::fs::create_dir_all(dir.path().join(objects.entries_path("j1", seq).as_ref()).join("in-the-way")).unwrap();
        (2..2 + CARRIED_ENTRIES_MAX as u64 + 64).for_each(block);
        for offset in 2..2 + CARRIED_ENTRIES_MAX as u64 {
            assert!(journal.append(entry("a", 0, offset, b"c")).await.is_err());
        }
        assert!(journal.refuses().is_some_and(|why| why.contains("has not taken the last 2048")), "{:?}", journal.refuses());
        // Object storage back: the carry is put with no new append (none
        // can come: they are refused), and writes are taken again. Before,
        // only a new append put the carry: refused for ever.
        for seq in 2..2 + CARRIED_ENTRIES_MAX as u64 + 64 {
            std::fs::remove_dir_all(dir.path().join(objects.entries_path("j1", seq).as_ref())).unwrap();
        }
        for _ in 0..100 {
            if journal.refuses().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(journal.refuses(), None, "the carry was put again");
        let offsets: Vec<u64> = {
            let mut all = Vec::new();
            for (_, path) in objects.entries("j1").await.unwrap() {
                all.extend(objects.read_entries(&path).await.unwrap().into_iter().map(|e| e.offset));
            }
            all
        };
        assert_eq!(offsets, (0..2 + CARRIED_ENTRIES_MAX as u64).collect::<Vec<_>>(), "every entry, in order, once");
    }

    /// The carry is bounded in bytes too (an object must stay readable:
    /// `OBJECT_BYTES_MAX`), and a journal opened again puts the local
    /// journal's unreleased entries first.
    #[tokio::test]
    async fn the_carry_is_bounded_in_bytes_and_unreleased_entries_are_put_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let unreleased = vec![entry("a", 0, 5, b"five"), entry("a", 0, 6, b"six")];
        let journal = ObjectJournal::open(
            objects.clone(),
            "j1",
            "n1",
            Duration::from_secs(60),
            unreleased.clone(),
            Vec::new(),
            LocalJournal::for_test(dir.path()),
        )
        .await
        .unwrap();
        for _ in 0..100 {
            if !objects.entries("j1").await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let held = objects.entries("j1").await.unwrap();
        assert_eq!(objects.read_entries(&held[0].1).await.unwrap(), unreleased, "put at open, before any new entry");
        let block = |seq: u64| std::fs::create_dir_all(dir.path().join(objects.entries_path("j1", seq).as_ref()).join("in-the-way")).unwrap();
        (1..64).for_each(block);
        let big = vec![7u8; 3 << 20];
        for offset in 7..10 {
            assert!(journal.append(entry("a", 0, offset, &big)).await.is_err());
        }
        assert!(journal.refuses().is_some_and(|why| why.contains("bytes")), "9 MiB carried: {:?}", journal.refuses());
    }

    /// Review of issue 36 (helper-18): the backlog put at open went into
    /// one object whatever its size; after a long log outage it could pass
    /// what a reader takes (`OBJECT_BYTES_MAX`), and every later open and
    /// claim failed reading it. It is split into objects within the group
    /// bounds, each lane still in order, and an append waits behind it.
    #[tokio::test]
    async fn a_large_backlog_at_open_is_put_in_objects_within_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from("root"));
        let backlog = GROUP_ENTRIES_MAX as u64 + 10;
        let unreleased: Vec<Entry> = (0..backlog).map(|offset| entry("a", 0, offset, b"x")).collect();
        let local = LocalJournal::for_test(dir.path());
        let journal = ObjectJournal::open(objects.clone(), "j1", "n1", Duration::from_secs(60), unreleased, Vec::new(), local).await.unwrap();
        journal.append(entry("a", 0, backlog, b"x")).await.unwrap();
        let held = held_offsets(&objects).await;
        assert!(held.iter().all(|object| object.len() <= GROUP_ENTRIES_MAX), "{:?}", held.iter().map(Vec::len).collect::<Vec<_>>());
        assert_eq!(held.concat(), (0..=backlog).collect::<Vec<_>>(), "every entry once, in order, the append last");
    }

    #[tokio::test]
    async fn one_claim_wins_until_it_is_stale() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let objects = JournalObjects::new(store, &ObjectPath::from(""));
        let hour = Duration::from_secs(3600);
        assert!(objects.claim("lost", "b", hour).await.unwrap());
        assert!(!objects.claim("lost", "c", hour).await.unwrap(), "claimed by b");
        assert!(objects.claim("lost", "b", hour).await.unwrap(), "b again: renewed");
        assert!(objects.claim("lost", "c", Duration::ZERO).await.unwrap(), "a stale claim is taken over");
        objects.retire("lost", None).await.unwrap();
        assert!(objects.claim("lost", "d", hour).await.unwrap());
    }
}
