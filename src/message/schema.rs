//! JSON Schemas of the contract, generated from the types. The committed copies live in
//! `docs/schema/`; `switchboard schema docs/schema` rewrites them and a test fails when they drift.

use super::types::{NormalizedMessage, NormalizedResponse};

/// `(file name, pretty JSON)` for each published schema.
#[must_use]
pub fn schemas() -> Vec<(&'static str, String)> {
    let render = |schema: schemars::Schema| {
        let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
        s.push('\n');
        s
    };
    vec![
        (
            "normalized-message.schema.json",
            render(schemars::schema_for!(NormalizedMessage)),
        ),
        (
            "normalized-response.schema.json",
            render(schemars::schema_for!(NormalizedResponse)),
        ),
    ]
}
