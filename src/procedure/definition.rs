//! A procedure's definition: what `PUT /v1/ns/{ns}/procedures/{name}`
//! takes, what the log entry carries (`codec::OpKind::Procedure`) and what
//! a partition's store keeps. One JSON document:
//!
//! ```json
//! {"runtime": "wasm", "module": "<the .wasm file, base64>",
//!  "params": {"qtycount": 100}, "fuel_per_record": 10000000,
//!  "memory_bytes": 16777216, "outputs": {"bad": "billing.bad"},
//!  "dead_letter_topic": "billing.aggdemo.dead", "version": 42}
//! ```
//!
//! `parse` checks every field against its bound with a message that says
//! which and why; the API calls it before anything is appended, the apply
//! loop again on every replica (a foreign producer may write anything), so
//! a definition that does not parse is refused at the API and skipped alike
//! on every replica.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest procedure name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Largest module (the .wasm file), in bytes; base64 in the definition,
/// which must fit a value (1 MiB).
pub const MODULE_BYTES_MAX: usize = 512 * 1024;
/// Largest `params` document (JSON text), in bytes.
pub const PARAMS_BYTES_MAX: usize = 64 * 1024;
/// Fuel per call: WebAssembly instructions (wasmtime's fuel), about a
/// nanosecond each; the default is ~10 ms of work per record.
pub const FUEL_PER_RECORD_DEFAULT: u64 = 10_000_000;
pub const FUEL_PER_RECORD_MAX: u64 = 1_000_000_000;
/// The bound on a module's linear memory.
pub const MEMORY_BYTES_DEFAULT: usize = 16 << 20;
/// One WebAssembly page.
pub const MEMORY_BYTES_MIN: usize = 64 << 10;
pub const MEMORY_BYTES_MAX: usize = 256 << 20;
/// Most named outputs mapped to topics.
pub const OUTPUTS_MAX: usize = 64;
/// Longest output name or topic name (Kafka's own bound on topic names).
pub const TOPIC_BYTES_MAX: usize = 249;

/// The runtimes a procedure can be written for (ARCHITECTURE.md, "Procedures":
/// chosen by measurement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// A WebAssembly module (wasmtime), from any language that compiles to
    /// it (`examples/procedures/` uses AssemblyScript).
    Wasm,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    pub runtime: Runtime,
    /// The module, base64 (standard alphabet, padded).
    #[serde(default)]
    pub module: String,
    #[serde(default = "empty_object")]
    pub params: serde_json::Value,
    #[serde(default = "fuel_default")]
    pub fuel_per_record: u64,
    #[serde(default = "memory_default")]
    pub memory_bytes: usize,
    /// Output name → topic; an output not named here goes to `<ns>.<output>`.
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Where a record the procedure failed on goes; default `<ns>.<name>.dead`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    /// Set by deployment (the deploy entry's offset in partition 0), never by the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// A deployment that removes the procedure (`DELETE`): no code runs from its version on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removed: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}
fn fuel_default() -> u64 {
    FUEL_PER_RECORD_DEFAULT
}
fn memory_default() -> usize {
    MEMORY_BYTES_DEFAULT
}

/// Whether `name` may name a procedure: 1..=64 bytes of `[A-Za-z0-9_-]`
/// (it becomes part of topic names and metric labels).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!("a procedure name has 1 to {NAME_BYTES_MAX} bytes, got {}", name.len()));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("a procedure name has only letters, digits, '_' and '-', got {c:?} in {name:?}"));
    }
    Ok(())
}

/// Whether `topic` may be a Kafka topic name: 1..=249 bytes of `[A-Za-z0-9._-]`.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() || topic.len() > TOPIC_BYTES_MAX {
        return Err(format!("a topic name has 1 to {TOPIC_BYTES_MAX} bytes, got {}", topic.len()));
    }
    if let Some(c) = topic.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("a topic name has only letters, digits, '.', '_' and '-', got {c:?} in {topic:?}"));
    }
    Ok(())
}

impl Definition {
    /// Parses and checks a definition (JSON text).
    pub fn parse(bytes: &[u8]) -> Result<Definition, String> {
        let definition: Definition = serde_json::from_slice(bytes).map_err(|e| format!("not a procedure definition: {e}"))?;
        definition.check()?;
        Ok(definition)
    }

    fn check(&self) -> Result<(), String> {
        if self.removed {
            return Ok(());
        }
        self.module_bytes()?;
        if !self.params.is_object() {
            return Err("params is a JSON object".into());
        }
        let params_bytes = self.params.to_string().len();
        if params_bytes > PARAMS_BYTES_MAX {
            return Err(format!("params has {params_bytes} bytes of JSON, more than the {PARAMS_BYTES_MAX} allowed"));
        }
        if !(1..=FUEL_PER_RECORD_MAX).contains(&self.fuel_per_record) {
            return Err(format!("fuel_per_record is 1 to {FUEL_PER_RECORD_MAX}, got {}", self.fuel_per_record));
        }
        if !(MEMORY_BYTES_MIN..=MEMORY_BYTES_MAX).contains(&self.memory_bytes) {
            return Err(format!("memory_bytes is {MEMORY_BYTES_MIN} to {MEMORY_BYTES_MAX}, got {}", self.memory_bytes));
        }
        if self.outputs.len() > OUTPUTS_MAX {
            return Err(format!("at most {OUTPUTS_MAX} outputs are named, got {}", self.outputs.len()));
        }
        for (output, topic) in &self.outputs {
            check_topic(output).map_err(|e| format!("output {output:?}: {e}"))?;
            check_topic(topic).map_err(|e| format!("output {output:?}: {e}"))?;
        }
        if let Some(topic) = &self.dead_letter_topic {
            check_topic(topic).map_err(|e| format!("dead_letter_topic: {e}"))?;
        }
        Ok(())
    }

    /// The module's bytes (decoded from base64, bounded).
    pub fn module_bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        if self.module.is_empty() {
            return Err("module is empty: give the .wasm file, base64".into());
        }
        if self.module.len() > MODULE_BYTES_MAX.div_ceil(3) * 4 {
            return Err(format!("module has more than the {MODULE_BYTES_MAX} bytes allowed"));
        }
        base64::engine::general_purpose::STANDARD.decode(&self.module).map_err(|e| format!("module is not base64: {e}"))
    }

    /// The JSON text kept in the log and the store.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a definition serializes")
    }

    /// Whether every topic this definition names is namespace `ns`'s own:
    /// `<ns>.` and at least one more byte. An output or dead-letter topic
    /// outside it would let the admin of one namespace write into topics
    /// another namespace owns (its outputs, or a log Tern reads). The log
    /// refuses the topics that are its own as well (`Log::check_outputs`).
    pub fn check_confined(&self, ns: &str) -> Result<(), String> {
        let named = self.outputs.iter().map(|(output, topic)| (format!("output {output:?}"), topic));
        let dead = self.dead_letter_topic.iter().map(|topic| ("dead_letter_topic".to_string(), topic));
        for (what, topic) in named.chain(dead) {
            if !crate::limits::is_namespace_output_topic(ns, topic) {
                return Err(format!("{what}: topic {topic:?} is not namespace {ns:?}'s: a procedure's topics start with \"{ns}.\""));
            }
        }
        Ok(())
    }

    /// The topic output `output` of this procedure goes to in namespace `ns`.
    pub fn topic_of(&self, ns: &str, output: &str) -> String {
        self.outputs.get(output).cloned().unwrap_or_else(|| format!("{ns}.{output}"))
    }

    /// Where records this procedure failed on go.
    pub fn dead_letter_topic(&self, ns: &str, name: &str) -> String {
        self.dead_letter_topic.clone().unwrap_or_else(|| format!("{ns}.{name}.dead"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_definition_takes_the_defaults_and_round_trips() {
        let d = Definition::parse(br#"{"runtime": "wasm", "module": "AGFzbQEAAAA="}"#).unwrap();
        assert_eq!(d.module_bytes().unwrap(), b"\0asm\x01\0\0\0");
        assert_eq!((d.fuel_per_record, d.memory_bytes, d.version), (FUEL_PER_RECORD_DEFAULT, MEMORY_BYTES_DEFAULT, None));
        assert_eq!(d.topic_of("billing", "bad"), "billing.bad");
        assert_eq!(d.dead_letter_topic("billing", "agg"), "billing.agg.dead");
        assert_eq!(Definition::parse(&d.to_json()).unwrap(), d);
    }

    #[test]
    fn every_bound_is_refused_with_what_was_wrong() {
        let big = "A".repeat(MODULE_BYTES_MAX.div_ceil(3) * 4 + 4);
        let m = r#""module": "AGFzbQEAAAA=""#;
        let cases = [
            (format!(r#"{{{m}}}"#), "missing field `runtime`"),
            (format!(r#"{{"runtime": "luau", {m}}}"#), "unknown variant `luau`"),
            (format!(r#"{{"runtime": "wasm", {m}, "extra": 1}}"#), "unknown field `extra`"),
            (format!(r#"{{"runtime": "wasm", "module": "{big}"}}"#), "more than the 524288 bytes allowed"),
            (r#"{"runtime": "wasm", "module": ""}"#.to_string(), "module is empty"),
            (r#"{"runtime": "wasm", "module": "not base64!"}"#.to_string(), "not base64"),
            (format!(r#"{{"runtime": "wasm", {m}, "params": [1]}}"#), "params is a JSON object"),
            (format!(r#"{{"runtime": "wasm", {m}, "fuel_per_record": 0}}"#), "fuel_per_record is 1 to"),
            (format!(r#"{{"runtime": "wasm", {m}, "memory_bytes": 1024}}"#), "memory_bytes is"),
            (format!(r#"{{"runtime": "wasm", {m}, "outputs": {{"a": "bad topic"}}}}"#), "output \"a\""),
            (format!(r#"{{"runtime": "wasm", {m}, "dead_letter_topic": ""}}"#), "dead_letter_topic"),
            ("not json".to_string(), "not a procedure definition"),
            (format!(r#"{{"runtime": "wasm", {m}, "fuel_per_record": {}}}"#, FUEL_PER_RECORD_MAX + 1), "fuel_per_record is 1 to"),
            (format!(r#"{{"runtime": "wasm", {m}, "memory_bytes": {}}}"#, MEMORY_BYTES_MAX + 1), "memory_bytes is"),
            (format!(r#"{{"runtime": "wasm", {m}, "params": {{"p": "{}"}}}}"#, "x".repeat(PARAMS_BYTES_MAX)), "params has"),
            (
                format!(
                    r#"{{"runtime": "wasm", {m}, "outputs": {{{}}}}}"#,
                    (0..=OUTPUTS_MAX).map(|i| format!(r#""o{i}": "t""#)).collect::<Vec<_>>().join(",")
                ),
                "at most 64 outputs",
            ),
        ];
        for (text, expected) in cases {
            let error = Definition::parse(text.as_bytes()).unwrap_err();
            assert!(error.contains(expected), "{text:.80}: {error}");
        }
    }

    #[test]
    fn names_and_topics_are_checked() {
        assert!(check_name("aggdemo_v2-b").is_ok());
        for bad in ["", "a/b", "é", "kv", &"n".repeat(65)] {
            assert_eq!(check_name(bad).is_err(), bad != "kv", "{bad:?}");
        }
        assert!(check_topic("ns.aggregated").is_ok());
        for (ns, topic, confined) in
            [("ns", "ns.a", true), ("ns", "ns.", false), ("ns", "nsx.a", false), ("ns", "tern.ns", false), ("ns", "ns", false)]
        {
            assert_eq!(crate::limits::is_namespace_output_topic(ns, topic), confined, "{ns} {topic}");
        }
    }

    #[test]
    fn a_definition_round_trips_through_its_json_exactly() {
        // Found by the fuzz target `procedure_definition`: without exact
        // float parsing (serde_json's float_roundtrip) a large number in
        // params drifted with each re-serialization (1.1844674407370955e20
        // came back as ...57e20), so a deployed version and its rollback differed.
        let text = br#"{"runtime": "wasm", "module": "AGFzbQEAAAA=", "params": {"q": 118446744073709551615, "f": 0.1, "e": 5e-324}}"#;
        let d = Definition::parse(text).unwrap();
        assert_eq!(Definition::parse(&d.to_json()).unwrap(), d);
    }

    #[test]
    fn a_definitions_topics_are_its_namespaces() {
        let m = r#""module": "AGFzbQEAAAA=""#;
        let own =
            Definition::parse(format!(r#"{{"runtime": "wasm", {m}, "outputs": {{"a": "billing.a"}}, "dead_letter_topic": "billing.d"}}"#).as_bytes())
                .unwrap();
        assert_eq!(own.check_confined("billing"), Ok(()));
        for (field, topic) in
            [("outputs", r#"{"a": "tern.victim"}"#), ("outputs", r#"{"a": "billingx.a"}"#), ("dead_letter_topic", r#""tern._src.v.t""#)]
        {
            let d = Definition::parse(format!(r#"{{"runtime": "wasm", {m}, "{field}": {topic}}}"#).as_bytes()).unwrap();
            let error = d.check_confined("billing").unwrap_err();
            assert!(error.contains("is not namespace \"billing\"'s"), "{error}");
        }
        assert!(check_topic(&"t".repeat(250)).is_err());
    }
}
