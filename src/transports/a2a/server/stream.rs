//! SSE answers: a task's stored events, in order, as `text/event-stream` frames (each with its
//! sequence number as the event id), followed live until the task ends its turn.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Served;
use super::call::{Binding, Call, Reply};
use crate::transports::a2a::tasks::ends_stream;
use crate::transports::a2a::wire::{self, TaskState, Version};

fn sse_frame(seq: i64, envelope: &Value) -> Bytes {
    Bytes::from(format!("id: {seq}\ndata: {envelope}\n\n"))
}

/// Streams the task's events after `from_seq` (after `first`, the task itself, when given)
/// until the task ends its turn or the client goes away.
pub(super) fn open_stream(
    state: &Served,
    call: &Call,
    task_id: &str,
    from_seq: i64,
    first: Option<Value>,
) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let engine = state.engine.clone();
    let (id, version, task_id) = (call.id.clone(), call.version, task_id.to_owned());
    let binding = call.binding;
    let render = move |ev: &Value| -> Value {
        let result = match version {
            Version::V1 => ev.clone(),
            Version::V03 => wire::stream_response_to_v03(ev),
        };
        match binding {
            Binding::JsonRpc => wire::result_envelope(&id, result),
            Binding::HttpJson => result,
        }
    };
    let replay_only = first.is_none();
    tokio::spawn(async move {
        let mut watch = engine.watch(&task_id);
        if let Some(task) = first {
            let ev = json!({ "task": &task });
            let terminal = task
                .pointer("/status/state")
                .and_then(Value::as_str)
                .and_then(TaskState::parse)
                .is_some_and(TaskState::is_terminal);
            if tx.send(sse_frame(from_seq, &render(&ev))).await.is_err() || terminal {
                return;
            }
        }
        let mut seq = from_seq;
        loop {
            let events = match engine.events_after(&task_id, seq).await {
                Ok(evs) => evs,
                Err(_) => return,
            };
            for e in events {
                seq = e.seq;
                let ev: Value = serde_json::from_str(&e.body).unwrap_or(Value::Null);
                if tx.send(sse_frame(e.seq, &render(&ev))).await.is_err() || ends_stream(&ev) {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
            // A replay of a task that has ended: nothing more will come.
            if replay_only
                && engine
                    .get(&task_id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| TaskState::parse(&r.state))
                    .is_some_and(TaskState::is_terminal)
            {
                return;
            }
            if !watch.changed(Duration::from_secs(15)).await
                && tx
                    .send(Bytes::from_static(b": keep-alive\n\n"))
                    .await
                    .is_err()
            {
                return;
            }
        }
    });
    Reply::Stream(rx)
}
