//! The operator API as an OpenAPI 3.1 document, generated from its wire types ([`super::wire`]).
//! The committed copy is `docs/api.openapi.json`; `switchboard openapi docs/api.openapi.json`
//! rewrites it and a test fails when it drifts.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Value, json};

use super::wire::{
    Accepted, AgentList, ApiError, AuditPage, BlockList, MessageView, PostMessage, ReportList,
    StatusView, ThreadDetail, ThreadPage,
};
use crate::message::NormalizedResponse;
use crate::moderation::{Block, NewBlock};

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

fn json_body(schema: &Schema, description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": schema } }
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({
        "name": name, "in": "path", "required": true, "description": description,
        "schema": { "type": "string" }
    })
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": schema })
}

/// The OpenAPI 3.1 document, pretty-printed with a final newline.
#[must_use]
pub fn document() -> String {
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .into_generator();
    let error = schema::<ApiError>(&mut g);
    let unauthorized = json_body(&error, "No or a wrong bearer token (`api.token`).");
    let not_found = |what: &str| json_body(&error, what);
    let post = schema::<PostMessage>(&mut g);
    let accepted = schema::<Accepted>(&mut g);
    let agents = schema::<AgentList>(&mut g);
    let page = schema::<ThreadPage>(&mut g);
    let thread = schema::<ThreadDetail>(&mut g);
    let message = schema::<MessageView>(&mut g);
    let response = schema::<NormalizedResponse>(&mut g);
    let status = schema::<StatusView>(&mut g);
    let blocks = schema::<BlockList>(&mut g);
    let block = schema::<Block>(&mut g);
    let new_block = schema::<NewBlock>(&mut g);
    let reports = schema::<ReportList>(&mut g);
    let audit = schema::<AuditPage>(&mut g);
    let id = path_param("id", "Switchboard's id of the message.");
    let doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "switchboard operator API",
            "version": "1",
            "description": "Hand agents messages and read what the instance holds. Every route needs `Authorization: Bearer {api.token}` and answers 404 while `api.token` is unset. See docs/api.md.",
            "license": { "name": "AGPL-3.0-or-later", "identifier": "AGPL-3.0-or-later" }
        },
        "security": [ { "bearer": [] } ],
        "paths": {
            "/api/v1/messages": { "post": {
                "operationId": "postMessage",
                "summary": "Hand an agent a message",
                "requestBody": { "required": true, "content": { "application/json": { "schema": post } } },
                "responses": {
                    "202": json_body(&accepted, "Stored; its dispatch is scheduled."),
                    "400": json_body(&error, "Malformed input; the text names the field."),
                    "401": unauthorized,
                    "404": not_found("No such agent."),
                    "413": json_body(&error, "Over `server.max_body_bytes`.")
                }
            }},
            "/api/v1/messages/{id}": { "get": {
                "operationId": "getMessage",
                "summary": "A message and its status",
                "parameters": [ id ],
                "responses": {
                    "200": json_body(&message, "The message."),
                    "401": unauthorized,
                    "404": not_found("No such message.")
                }
            }},
            "/api/v1/messages/{id}/response": { "get": {
                "operationId": "getResponse",
                "summary": "The agent's response to a message",
                "parameters": [ id ],
                "responses": {
                    "200": json_body(&response, "The response."),
                    "401": unauthorized,
                    "404": not_found("No such message, or no response yet (queued, dispatching)."),
                    "409": json_body(&status, "There will be no response: `no_reply`, or `failed` with its `error_class`.")
                }
            }},
            "/api/v1/agents": { "get": {
                "operationId": "listAgents",
                "summary": "The hosted agents and their addresses",
                "responses": {
                    "200": json_body(&agents, "The agents."),
                    "401": unauthorized
                }
            }},
            "/api/v1/threads": { "get": {
                "operationId": "listThreads",
                "summary": "Threads on every transport, newest first",
                "parameters": [
                    query_param("agent", "Only threads this agent (local name) took part in.", json!({"type": "string"})),
                    query_param("transport", "Only threads on this transport (`api`, `activitypub`, `a2a`, `email`).", json!({"type": "string"})),
                    query_param("cursor", "`next_cursor` of the previous page.", json!({"type": "string"})),
                    query_param("limit", "Threads per page.", json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 50}))
                ],
                "responses": {
                    "200": json_body(&page, "One page."),
                    "400": json_body(&error, "A cursor this API did not return, or a limit out of range."),
                    "401": unauthorized
                }
            }},
            "/api/v1/threads/{id}": { "get": {
                "operationId": "getThread",
                "summary": "A thread's messages and responses in order",
                "parameters": [ path_param("id", "Switchboard's id of the thread.") ],
                "responses": {
                    "200": json_body(&thread, "The thread."),
                    "401": unauthorized,
                    "404": not_found("No such thread.")
                }
            }},
            "/api/v1/blocks": {
                "get": {
                    "operationId": "listBlocks",
                    "summary": "The senders refused: the configuration file's blocks and those added at run time",
                    "responses": {
                        "200": json_body(&blocks, "Every block in force."),
                        "401": unauthorized
                    }
                },
                "post": {
                    "operationId": "addBlock",
                    "summary": "Refuse a sender, for the whole server or one agent (stored; every instance within 5 s)",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": new_block } } },
                    "responses": {
                        "201": json_body(&block, "The stored block (the same block twice is stored once)."),
                        "400": json_body(&error, "An unknown kind, an empty pattern, an unknown agent."),
                        "401": unauthorized
                    }
                }
            },
            "/api/v1/blocks/{id}": { "delete": {
                "operationId": "removeBlock",
                "summary": "Remove a block added at run time",
                "parameters": [ path_param("id", "The block's id.") ],
                "responses": {
                    "204": { "description": "Removed." },
                    "401": unauthorized,
                    "404": not_found("No stored block has this id."),
                    "409": json_body(&error, "The block is in the configuration file.")
                }
            }},
            "/api/v1/reports": { "get": {
                "operationId": "listReports",
                "summary": "Reports of abuse received from remote servers, newest first",
                "parameters": [
                    query_param("agent", "Only reports about this agent (local name).", json!({"type": "string"})),
                    query_param("limit", "Reports answered at most.", json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 50}))
                ],
                "responses": {
                    "200": json_body(&reports, "The reports."),
                    "400": json_body(&error, "A limit out of range."),
                    "401": unauthorized
                }
            }},
            "/api/v1/audit": { "get": {
                "operationId": "listAudit",
                "summary": "The operator actions recorded (blocks, queue retries and purges, messages handed in, …), newest first",
                "parameters": [
                    query_param("since", "Only actions taken at or after this RFC 3339 time.", json!({"type": "string", "format": "date-time"})),
                    query_param("action", "Only this action (`block.add`, `block.remove`, `queue.retry`, `queue.purge`, `message.send`, …).", json!({"type": "string"})),
                    query_param("cursor", "`next_cursor` of the previous page.", json!({"type": "string"})),
                    query_param("limit", "Records per page.", json!({"type": "integer", "minimum": 1, "maximum": 200, "default": 50}))
                ],
                "responses": {
                    "200": json_body(&audit, "One page."),
                    "400": json_body(&error, "A `since` that is not RFC 3339, a cursor this API did not return, or a limit out of range."),
                    "401": unauthorized
                }
            }}
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": g.take_definitions(true)
        }
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_document_matches_the_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.openapi.json");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == super::document(),
            "docs/api.openapi.json is stale: run `cargo run -- openapi docs/api.openapi.json` and commit the result"
        );
    }
}
