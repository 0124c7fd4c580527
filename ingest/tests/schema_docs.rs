//! The documented wire format and the code agree: every example in
//! `docs/examples/events.jsonl` decodes and re-encodes to the same JSON, and
//! the JSON Schema in `docs/event-schema.json` lists exactly the fields the
//! encoder writes.

use std::collections::BTreeSet;

use jobcast_ingest::decode;

fn docs(path: &str) -> String {
    let full = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/");
    std::fs::read_to_string(format!("{full}{path}")).unwrap()
}

#[test]
fn examples_round_trip() {
    let examples = docs("examples/events.jsonl");
    let mut types = BTreeSet::new();
    for (i, line) in examples.lines().enumerate() {
        let event = decode(line.as_bytes()).unwrap_or_else(|e| panic!("example {}: {e}", i + 1));
        types.insert(event.type_name());
        let original: serde_json::Value = serde_json::from_str(line).unwrap();
        let encoded: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        assert_eq!(original, encoded, "example {}", i + 1);
    }
    assert_eq!(types.len(), 4, "examples cover every event type: {types:?}");
}

#[test]
fn schema_lists_exactly_the_encoded_fields() {
    let schema: serde_json::Value = serde_json::from_str(&docs("event-schema.json")).unwrap();
    let documented: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut encoded = BTreeSet::new();
    for line in docs("examples/events.jsonl").lines() {
        let event = decode(line.as_bytes()).unwrap();
        let value: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
        encoded.extend(value.as_object().unwrap().keys().cloned());
    }
    // The examples carry every optional field at least once.
    assert_eq!(documented, encoded);
    assert_eq!(
        schema["properties"]["v"]["const"],
        jobcast_ingest::event::SCHEMA_VERSION
    );
}
