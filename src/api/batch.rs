//! Atomic batches: `POST /v1/ns/{ns}/batch` `{"ops": [...]}`, all ops in
//! one partition, all conditions holding or nothing applied.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;

use super::body;
use super::keys::namespace;
use super::keys::NsName;
use super::params::Params;
use super::write::{condition_of, write_id, write_records};
use crate::auth::Verb;
use crate::codec::{Mutation, Op, OpKind};
use crate::edge::{require, require_anywhere, ApiError, AppState, Caller, Incoming};
use crate::limits;

/// Slack above 4 MiB of keys and values for the JSON framing of a batch body.
const BATCH_BODY_BYTES_MAX: usize = limits::MUTATION_BYTES_MAX + 1024 * 1024;
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    ops: Vec<BatchOp>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchOp {
    op: String,
    pk: String,
    #[serde(default)]
    sk: String,
    /// `Some` whenever the key is present, `"value": null` too (a put of
    /// JSON null, as a single PUT accepts); `None` only when absent.
    #[serde(default, deserialize_with = "present")]
    value: Option<Box<serde_json::value::RawValue>>,
    if_version: Option<u64>,
    #[serde(default)]
    if_absent: bool,
}

/// A present field, `null` included (serde's `Option` reads `null` as absent).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<serde_json::value::RawValue>>, D::Error> {
    Box::<serde_json::value::RawValue>::deserialize(d).map(Some)
}

fn batch_op(index: usize, op: BatchOp) -> Result<Op, ApiError> {
    let at = |e: ApiError| ApiError { message: format!("op {index}: {}", e.message), ..e }.with("op_index", index);
    limits::check_pk(&op.pk).map_err(|e| at(e.into()))?;
    limits::check_sk(&op.sk).map_err(|e| at(e.into()))?;
    let condition = condition_of(op.if_version, op.if_absent, "invalid_op").map_err(at)?;
    let kind = match (op.op.as_str(), op.value) {
        ("put", Some(value)) => {
            let text = Bytes::from(value.get().to_string());
            limits::check_value_len(text.len()).map_err(|e| at(e.into()))?;
            OpKind::Put(text)
        }
        ("put", None) => return Err(at(ApiError::bad_request("invalid_op", "a put needs a value"))),
        ("delete", None) => OpKind::Delete,
        // A uniform op shape may carry `"value": null` on a delete: nothing to put.
        ("delete", Some(value)) if value.get() == "null" => OpKind::Delete,
        ("delete", Some(_)) => return Err(at(ApiError::bad_request("invalid_op", "a delete takes no value"))),
        (other, _) => return Err(at(ApiError::bad_request("invalid_op", format!("op must be \"put\" or \"delete\", got {other:?}")))),
    };
    Ok(Op { pk: op.pk, sk: op.sk, kind, condition })
}

/// `POST /v1/ns/{ns}/batch`
pub(super) async fn batch(
    State(state): State<AppState>,
    Caller(identity): Caller,
    NsName(ns): NsName,
    uri: Uri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Body,
) -> Result<Response, ApiError> {
    require_anywhere(&identity, &ns, Verb::Write)?;
    let namespace = namespace(&state, &ns)?;
    let params = Params::parse(query.as_deref(), &["wait", "timeout_ms", "durability"])?;
    let bytes = body::read(body, BATCH_BODY_BYTES_MAX, "batch_too_large", "the batch body").await?;
    let request: BatchBody = body::json(&bytes)?;
    limits::check_ops_count(request.ops.len())?;
    let ops = request.ops.into_iter().enumerate().map(|(i, op)| batch_op(i, op)).collect::<Result<Vec<_>, _>>()?;
    for op in &ops {
        require(&identity, &ns, &op.pk, Verb::Write)?;
    }
    let incoming = Incoming::new(axum::http::Method::POST, &uri, &headers).by(&identity);
    let mutation = Mutation { write_id: write_id(&incoming)?, ops, writer: super::write::writer_of(&incoming), ..Default::default() };
    limits::check_mutation_bytes(mutation.payload_bytes())?;
    let partition = namespace.partition_of(&mutation.ops[0].pk);
    if let Some((i, op)) = mutation.ops.iter().enumerate().find(|(_, op)| namespace.partition_of(&op.pk) != partition) {
        return Err(ApiError::bad_request(
            "cross_partition",
            format!(
                "op {i} (pk {:?}) is in partition {}, op 0 (pk {:?}) in partition {partition}: a batch is atomic \
                 only within one partition; use pks that share a partition or split the batch",
                op.pk,
                namespace.partition_of(&op.pk),
                mutation.ops[0].pk
            ),
        ));
    }
    write_records(&state, &incoming, &namespace, partition, mutation, &params, bytes).await
}
