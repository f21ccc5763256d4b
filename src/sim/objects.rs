//! Object storage that fails when the simulation says so: the journals'
//! copies (`journal/objects.rs`) over an in-memory store whose puts of
//! entries and claims, and whose deletes, fail while an outage is in force
//! (`Fault::ObjectsFail`).
//!
//! What fails is chosen so a run stays a function of its seed: a failed
//! entry put is carried into the journal's next object, a failed claim
//! step is tried at the next `Claim` action, a failed delete leaves
//! released objects for a later claim to replay (each must apply once).
//! Reads and lease puts never fail: a journal that cannot open its objects
//! keeps trying on a real-time timer, which would make a replay depend on
//! the machine's speed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    Result,
};

/// An in-memory store with an outage switch.
#[derive(Debug, Default)]
pub(super) struct FlakyObjects {
    inner: InMemory,
    failing: AtomicBool,
}

impl FlakyObjects {
    /// Turns the outage on or off (for the next step).
    pub(super) fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::Relaxed);
    }

    fn fails(&self, location: &Path) -> bool {
        self.failing.load(Ordering::Relaxed) && location.filename() != Some("lease.json")
    }
}

fn outage(location: &Path) -> object_store::Error {
    super::world::count(&super::world::STATS.objects_refused);
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
        if self.fails(location) {
            return Err(outage(location));
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        if self.fails(location) {
            return Err(outage(location));
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        match self.failing.load(Ordering::Relaxed) {
            true => locations.map(|location| location.and_then(|l| Err(outage(&l)))).boxed(),
            false => self.inner.delete_stream(locations),
        }
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        if self.fails(to) {
            return Err(outage(to));
        }
        self.inner.copy_opts(from, to, options).await
    }
}

/// The store as the journals see it, and its switch.
pub(super) fn flaky_objects() -> (Arc<dyn ObjectStore>, Arc<FlakyObjects>) {
    let store = Arc::new(FlakyObjects::default());
    (store.clone(), store)
}
