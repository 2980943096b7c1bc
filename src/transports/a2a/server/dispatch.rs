//! The method table: authenticates the caller, checks the per-agent endpoint's policy, and
//! runs the operation a call names.

use super::Served;
use super::call::{Call, Reply};
use super::push_config::{create_push, delete_push, get_push, list_push};
use super::send::send;
use super::tasks::{cancel_task, get_task, list_tasks, subscribe};
use crate::transports::a2a::scope;
use crate::transports::a2a::wire::{
    METHOD_NOT_FOUND, RpcError, UNAUTHENTICATED, UNSUPPORTED_OPERATION,
};

pub(super) async fn dispatch(state: Served, mut call: Call) -> Result<Reply, RpcError> {
    call.caller = state
        .authenticate(
            call.authorization.as_deref(),
            call.agent.as_deref(),
            call.client,
        )
        .await?;
    if call.caller.issuer.is_none() {
        call.caller.sender.client = call.client;
        call.caller.owner = scope::anonymous_owner(call.client);
    }
    if let Some(agent) = &call.agent {
        state.admit(&call.caller, agent, call.client)?;
    }
    match call.method {
        "SendMessage" => send(&state, call, false).await,
        "SendStreamingMessage" => send(&state, call, true).await,
        "GetTask" => get_task(&state, &call).await.map(Reply::Json),
        "ListTasks" => list_tasks(&state, &call).await.map(Reply::Json),
        "CancelTask" => cancel_task(&state, &call).await.map(Reply::Json),
        "SubscribeToTask" => subscribe(&state, &call).await,
        "GetExtendedAgentCard" => extended_card(&state, &call).map(Reply::Json),
        "CreateTaskPushNotificationConfig" => create_push(&state, &call).await.map(Reply::Json),
        "GetTaskPushNotificationConfig" => get_push(&state, &call).await.map(Reply::Json),
        "ListTaskPushNotificationConfigs" => list_push(&state, &call).await.map(Reply::Json),
        "DeleteTaskPushNotificationConfig" => delete_push(&state, &call).await.map(Reply::Json),
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("Method not found: {other}"),
        )),
    }
}

/// `GetExtendedAgentCard`: the agent's extended card, to a caller whose credential the agent
/// accepted. An agent without one declares `extendedAgentCard: false`, so the call is
/// unsupported there (and at the hub, which speaks for several agents).
fn extended_card(state: &Served, call: &Call) -> Result<serde_json::Value, RpcError> {
    let card = call
        .agent
        .as_deref()
        .and_then(|a| state.extended_cards.get(&a.to_lowercase()));
    let Some(card) = card else {
        return Err(RpcError::new(
            UNSUPPORTED_OPERATION,
            "This agent declares no extended agent card",
        ));
    };
    if call.caller.issuer.is_none() {
        return Err(RpcError::new(
            UNAUTHENTICATED,
            "The extended agent card is for authenticated callers",
        ));
    }
    Ok(card.clone())
}
