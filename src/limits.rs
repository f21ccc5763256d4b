//! Every size limit of the spec, in one place, with the checks that enforce them.
//!
//! The same checks run twice: at the API (so a bad request gets a precise 4xx
//! and nothing is written) and in the apply loop (so a malformed entry written
//! by a foreign producer is skipped identically on every replica).

/// Longest partition key, in bytes of UTF-8.
pub const PK_BYTES_MAX: usize = 1024;
/// Longest sort key, in bytes of UTF-8.
pub const SK_BYTES_MAX: usize = 1024;
/// Largest value, in bytes of compact JSON text.
pub const VALUE_BYTES_MAX: usize = 1024 * 1024;
/// Most operations in one mutation (atomic batch).
pub const OPS_PER_MUTATION_MAX: usize = 1000;
/// Largest total of keys and values in one mutation.
pub const MUTATION_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Most locations one mutation's Firebase rules may have read
/// (`codec::TreeRead`, checked at apply): rules stop reading at 1,000
/// (`firebase::rules::eval::READS_MAX`), server values resolved for rules
/// read within the same bound.
pub const MUTATION_READS_MAX: usize = 1000;
/// Most bytes one mutation's reads may cost when they are checked at
/// apply (each read's JSON, or `store::tree::READ_BYTES_MAX` for a
/// location too large to read): every replica pays it again, so a write
/// whose rules read more is refused before it is logged.
pub const MUTATION_READ_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Largest list page.
pub const LIST_LIMIT_MAX: usize = 1000;
/// List page size when the client does not say.
pub const LIST_LIMIT_DEFAULT: usize = 100;
/// Most keys in one multi-get.
pub const MULTI_GET_KEYS_MAX: usize = 1000;
/// Most bytes of records one answer holds (a multi-get, a page of a list):
/// a list page ends early at it (its cursor goes on), a multi-get past it is
/// refused (`answer_too_large`). Without it one small request for the same
/// 1 MiB record 1,000 times made a 1 GB answer.
pub const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Longest write id carried by a mutation.
pub const WRITE_ID_BYTES_MAX: usize = 64;
/// The most bytes of a log entry's `writer` (who wrote it, shown in a
/// record's history): a key id, `root` or `jwt:<sub>`, cut to fit.
pub const WRITER_BYTES_MAX: usize = 128;
/// The most versions a namespace may keep per record (`history_max`).
pub const HISTORY_MAX_MAX: u32 = 64;
/// Most partitions a namespace may have (each is a store file and an apply task).
pub const PARTITIONS_MAX: u32 = 1024;
/// Longest namespace name.
pub const NAMESPACE_NAME_BYTES_MAX: usize = 64;
/// Longest a read may wait for `after=` / `consistency=strong` / `wait=applied`.
pub const WAIT_MS_MAX: u64 = 30_000;
/// Default bounded wait for the same.
pub const WAIT_MS_DEFAULT: u64 = 5_000;

/// A violated limit: a stable snake_case code and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError {
    pub code: &'static str,
    pub message: String,
    /// True when the violation is about size (HTTP 413), false for shape (HTTP 400).
    pub too_large: bool,
}

impl LimitError {
    fn too_large(code: &'static str, message: String) -> Self {
        LimitError { code, message, too_large: true }
    }
    fn invalid(code: &'static str, message: String) -> Self {
        LimitError { code, message, too_large: false }
    }
}

pub fn check_pk(pk: &str) -> Result<(), LimitError> {
    if pk.is_empty() {
        return Err(LimitError::invalid("invalid_key", "pk must not be empty".into()));
    }
    if pk.len() > PK_BYTES_MAX {
        return Err(LimitError::too_large("key_too_large", format!("pk is {} bytes; the limit is {PK_BYTES_MAX} bytes of UTF-8", pk.len())));
    }
    Ok(())
}

pub fn check_sk(sk: &str) -> Result<(), LimitError> {
    if sk.len() > SK_BYTES_MAX {
        return Err(LimitError::too_large("key_too_large", format!("sk is {} bytes; the limit is {SK_BYTES_MAX} bytes of UTF-8", sk.len())));
    }
    Ok(())
}

pub fn check_value_len(value_bytes: usize) -> Result<(), LimitError> {
    if value_bytes > VALUE_BYTES_MAX {
        return Err(LimitError::too_large(
            "value_too_large",
            format!("value is {value_bytes} bytes of JSON; the limit is {VALUE_BYTES_MAX} bytes (1 MiB)"),
        ));
    }
    Ok(())
}

pub fn check_ops_count(count: usize) -> Result<(), LimitError> {
    if count == 0 {
        return Err(LimitError::invalid("invalid_batch", "a batch needs at least one op".into()));
    }
    if count > OPS_PER_MUTATION_MAX {
        return Err(LimitError::too_large("batch_too_large", format!("batch has {count} ops; the limit is {OPS_PER_MUTATION_MAX} ops per batch")));
    }
    Ok(())
}

pub fn check_mutation_bytes(total_bytes: usize) -> Result<(), LimitError> {
    if total_bytes > MUTATION_BYTES_MAX {
        return Err(LimitError::too_large(
            "batch_too_large",
            format!("batch keys and values total {total_bytes} bytes; the limit is {MUTATION_BYTES_MAX} bytes (4 MiB)"),
        ));
    }
    Ok(())
}

/// Names no namespace may take: the object store keeps each namespace's
/// snapshots under `tern/<namespace>/` and the journals under
/// `tern/journal/` (`journal::objects`), so a namespace `journal` would mix
/// its snapshots into the journals a node replays.
pub const RESERVED_NAMESPACE_NAMES: [&str; 1] = ["journal"];

/// Namespace names become file and topic names, so they are kept to a safe alphabet.
pub fn check_namespace_name(name: &str) -> Result<(), LimitError> {
    if RESERVED_NAMESPACE_NAMES.contains(&name) {
        return Err(LimitError::invalid(
            "invalid_namespace",
            format!("namespace name {name:?} is reserved: the object store keeps Tern's journals under tern/{name}/; choose another name"),
        ));
    }
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let ok_start = name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > NAMESPACE_NAME_BYTES_MAX || !ok_chars || !ok_start {
        return Err(LimitError::invalid(
            "invalid_namespace",
            format!(
                "namespace name {name:?} is invalid: use 1 to {NAMESPACE_NAME_BYTES_MAX} characters of \
                 [A-Za-z0-9_-], starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

/// Whether `topic` is one of namespace `ns`'s own topics for procedure
/// outputs: `<ns>.` and at least one more byte. A namespace name has no
/// dot, so no two namespaces share one (log/kafka/outputs.rs).
pub fn is_namespace_output_topic(ns: &str, topic: &str) -> bool {
    topic.strip_prefix(ns).and_then(|rest| rest.strip_prefix('.')).is_some_and(|rest| !rest.is_empty())
}

pub fn check_partitions(partitions: u32) -> Result<(), LimitError> {
    if partitions == 0 || partitions > PARTITIONS_MAX {
        return Err(LimitError::invalid("invalid_partitions", format!("partitions must be between 1 and {PARTITIONS_MAX}; got {partitions}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pk_limits() {
        assert!(check_pk("a").is_ok());
        assert!(check_pk(&"a".repeat(PK_BYTES_MAX)).is_ok());
        let err = check_pk(&"a".repeat(PK_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(err.code, "key_too_large");
        assert!(err.too_large);
        assert_eq!(check_pk("").unwrap_err().code, "invalid_key");
        // Multi-byte UTF-8 counts bytes, not characters.
        assert!(check_pk(&"é".repeat(513)).is_err());
    }

    #[test]
    fn sk_may_be_empty_but_bounded() {
        assert!(check_sk("").is_ok());
        assert!(check_sk(&"s".repeat(SK_BYTES_MAX)).is_ok());
        assert!(check_sk(&"s".repeat(SK_BYTES_MAX + 1)).is_err());
    }

    #[test]
    fn value_and_batch_limits() {
        assert!(check_value_len(VALUE_BYTES_MAX).is_ok());
        assert_eq!(check_value_len(VALUE_BYTES_MAX + 1).unwrap_err().code, "value_too_large");
        assert!(check_ops_count(1).is_ok());
        assert!(check_ops_count(OPS_PER_MUTATION_MAX).is_ok());
        assert_eq!(check_ops_count(0).unwrap_err().code, "invalid_batch");
        assert!(check_ops_count(OPS_PER_MUTATION_MAX + 1).unwrap_err().too_large);
        assert!(check_mutation_bytes(MUTATION_BYTES_MAX).is_ok());
        assert!(check_mutation_bytes(MUTATION_BYTES_MAX + 1).is_err());
    }

    #[test]
    fn reserved_namespace_names_are_refused() {
        // Before the fix, a namespace "journal" put its snapshots where a node
        // lists the journals to replay (issue 35, defect 9).
        let error = check_namespace_name("journal").unwrap_err();
        assert!(error.message.contains("reserved"), "{}", error.message);
        assert!(check_namespace_name("journals").is_ok());
        assert!(check_namespace_name("Journal").is_ok(), "object paths are case-sensitive");
    }

    #[test]
    fn namespace_names() {
        for ok in ["default", "a", "dns-records", "ML_features_2"] {
            assert!(check_namespace_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-x", "a/b", "a.b", "ns with space", &"n".repeat(65), "é"] {
            assert!(check_namespace_name(bad).is_err(), "{bad}");
        }
        assert!(check_partitions(1).is_ok());
        assert!(check_partitions(PARTITIONS_MAX).is_ok());
        assert!(check_partitions(0).is_err());
        assert!(check_partitions(PARTITIONS_MAX + 1).is_err());
    }
}
