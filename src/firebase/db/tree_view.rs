//! The tree as this node has applied it: the read view rules and queries
//! read, and what a change event says was written.

use std::sync::Arc;

use serde_json::Value;

use crate::partition::{Namespace, ReadView};
use crate::store::tree::{value_at, READ_BYTES_MAX};
use crate::store::StoreError;
use crate::tree::TREE_PK;

/// The tree as this node has applied it, for rules to read.
pub struct TreeData {
    pub view: Arc<ReadView>,
}

impl crate::firebase::rules::eval::Data for TreeData {
    fn current(&self, sk: &str) -> Value {
        value_at(&self.view.reader, TREE_PK, sk, false, READ_BYTES_MAX).unwrap_or(Value::Null)
    }
    fn priority(&self, sk: &str) -> Value {
        let leaf = self.view.reader.get(TREE_PK, &crate::tree::path::join(sk, crate::tree::path::PRIORITY_KEY));
        leaf.ok().flatten().and_then(|record| serde_json::from_slice(&record.value).ok()).unwrap_or(Value::Null)
    }
}

/// A read view of the tree's partition: the one its other readers share
/// while nothing new was applied (`Handle::read_view`), so a read after
/// this node applied a write sees it.
pub fn tree_view(namespace: &Namespace) -> Result<Arc<ReadView>, StoreError> {
    namespace.handle(namespace.partition_of(TREE_PK)).read_view()
}

/// The `value` of a change event (`{"pk", "sk", "value", …}`): what the
/// op wrote (a tree op's value, resolved by the apply loop).
pub fn event_value(event: &crate::fanout::Event) -> Value {
    serde_json::from_slice::<Value>(&event.data).ok().and_then(|mut v| v.get_mut("value").map(Value::take)).unwrap_or(Value::Null)
}
