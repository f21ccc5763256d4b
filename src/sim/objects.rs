//! Object storage that fails when the simulation says so: the journals'
//! copies (`journal/objects.rs`) over an in-memory store whose puts (of
//! entries, claims and leases) and deletes fail while an outage is in force
//! (`Fault::ObjectsFail`). Every other refused put or delete was done all
//! the same (the answer was lost, not the request): an object stored twice,
//! a delete reported failed that deleted, a lease written that its owner
//! believes was not.
//!
//! What fails is chosen so a run stays a function of its seed: whether a
//! refusal was done all the same is a hash of the run's salt, the request's
//! path and how many requests to that path were refused before (so a
//! request a real-time timer adds changes nothing for the others). A failed entry
//! put is carried into the journal's next object, a failed claim step is
//! tried at the next `Claim` action, a failed delete leaves released objects
//! for a later claim to replay (each must apply once), a failed lease put
//! fails the put or the deletion it was to cover. Reads never fail, nor
//! does the lease put of a journal while it opens (`spare_lease`): a
//! journal that cannot open its objects keeps trying on a real-time timer,
//! which would make a replay depend on the machine's speed. (The
//! simulation's claims write no claim: they plan, append and finish.)

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions,
    PutPayload, PutResult, Result,
};

/// An in-memory store with an outage switch.
#[derive(Debug)]
pub(super) struct FlakyObjects {
    inner: InMemory,
    switch: Arc<Switch>,
}

/// The outage's state (shared with the store's delete streams).
#[derive(Debug, Default)]
struct Switch {
    failing: AtomicBool,
    /// While a journal opens, the path of its lease: that put does not fail.
    spared: Mutex<Option<String>>,
    /// The run's salt (`Dice::objects_salt`).
    salt: u64,
    /// Per path, the refusals so far (bounded by the paths of a run).
    refusals: Mutex<HashMap<String, u64>>,
}

/// What an outage does to one put or delete.
enum Refusal {
    /// Not refused: done and answered.
    None,
    /// Refused, and not done.
    Lost,
    /// Done, and refused all the same (its answer was lost).
    AnswerLost,
}

impl FlakyObjects {
    /// Turns the outage on or off (for the next step).
    pub(super) fn set_failing(&self, failing: bool) {
        self.switch.failing.store(failing, Ordering::Relaxed);
    }

    /// While it is set, journal `journal_id`'s lease puts do not fail (its open); None: every one may.
    pub(super) fn spare_lease(&self, journal_id: Option<&str>) {
        *self.switch.spared.lock() = journal_id.map(|id| format!("{id}/lease.json"));
    }

    fn refusal(&self, location: &Path) -> Refusal {
        self.switch.refusal(location)
    }
}

impl Switch {
    fn refusal(&self, location: &Path) -> Refusal {
        let path = location.as_ref();
        let spared = self.spared.lock().as_deref().is_some_and(|lease| path.ends_with(lease));
        if !self.failing.load(Ordering::Relaxed) || spared {
            return Refusal::None;
        }
        super::world::count(&super::world::STATS.objects_refused);
        let before = {
            let mut refusals = self.refusals.lock();
            let count = refusals.entry(path.to_string()).or_insert(0);
            *count += 1;
            *count - 1
        };
        // SipHash with fixed keys: the same on every run of one toolchain
        // (std does not promise it across Rust releases; a seed found on
        // one toolchain may replay differently on another).
        let mut hasher = std::hash::DefaultHasher::new();
        (self.salt, path, before).hash(&mut hasher);
        match hasher.finish() % 2 {
            0 => Refusal::Lost,
            _ => Refusal::AnswerLost,
        }
    }
}

/// A request done, whose answer was lost: counted, and refused.
fn answer_lost(location: &Path) -> object_store::Error {
    super::world::count(&super::world::STATS.objects_answers_lost);
    outage(location)
}

fn outage(location: &Path) -> object_store::Error {
    object_store::Error::Generic { store: "sim", source: format!("object storage is down (simulated): {location}").into() }
}

impl std::fmt::Display for FlakyObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlakyObjects({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FlakyObjects {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        match self.refusal(location) {
            Refusal::None => self.inner.put_opts(location, payload, opts).await,
            Refusal::Lost => Err(outage(location)),
            Refusal::AnswerLost => self.inner.put_opts(location, payload, opts).await.and_then(|_| Err(answer_lost(location))),
        }
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        match self.refusal(location) {
            Refusal::None => self.inner.put_multipart_opts(location, opts).await,
            // Refused, never done (a multipart upload is not begun).
            Refusal::Lost | Refusal::AnswerLost => Err(outage(location)),
        }
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        // Each refused (or not) as a put is.
        let (inner, switch) = (self.inner.clone(), self.switch.clone());
        locations
            .then(move |location| {
                let (inner, switch) = (inner.clone(), switch.clone());
                async move {
                    let location = location?;
                    match switch.refusal(&location) {
                        Refusal::None => inner.delete(&location).await.map(|_| location),
                        Refusal::Lost => Err(outage(&location)),
                        Refusal::AnswerLost => inner.delete(&location).await.and_then(|_| Err(answer_lost(&location))),
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        match self.refusal(to) {
            Refusal::None => self.inner.copy_opts(from, to, options).await,
            Refusal::Lost => Err(outage(to)),
            Refusal::AnswerLost => self.inner.copy_opts(from, to, options).await.and_then(|_| Err(answer_lost(to))),
        }
    }
}

/// The store as the journals see it, and its switch; `salt` decides which
/// refusals were done all the same.
pub(super) fn flaky_objects(salt: u64) -> (Arc<dyn ObjectStore>, Arc<FlakyObjects>) {
    let switch = Switch { salt, ..Switch::default() };
    let store = Arc::new(FlakyObjects { inner: InMemory::new(), switch: Arc::new(switch) });
    (store.clone(), store)
}
