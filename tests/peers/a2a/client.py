"""Drives switchboard with the a2a-sdk 1.3.0 client and prints what it saw as one JSON object.

Usage: client.py BASE_URL [TOKEN]. The agent at BASE_URL answers like echo, and asks for input
(TASK_STATE_INPUT_REQUIRED) when a message contains "need input". With A2A_BINDING set
(`HTTP+JSON`) the clients speak that binding of the card instead of the SDK's first choice.
Other modes: `client.py auth BASE_URL [TOKEN]` sends one message and reports the outcome;
`client.py policy BASE_URL EXTENSION_URI` asks for consent, answers with the policy state in
message metadata under EXTENSION_URI, then presents the same state again in a new task;
`client.py push BASE_URL WEBHOOK_URL` registers a push config on an input-required task, then
completes the task.
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)


def msg(text, task_id=None, context_id=None):
    m = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])
    if task_id:
        m.task_id = task_id
    if context_id:
        m.context_id = context_id
    return m


def d(pb):
    return MessageToDict(pb)


async def main(base, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out = {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        out["card"] = {"name": card.name, "streaming": card.capabilities.streaming,
                       "url": card.supported_interfaces[0].url}
        binding = os.environ.get("A2A_BINDING")
        pick = {"supported_protocol_bindings": [binding]} if binding else {}
        blocking = await create_client(card, client_config=ClientConfig(streaming=False, httpx_client=http, **pick))
        streaming = await create_client(card, client_config=ClientConfig(streaming=True, httpx_client=http, **pick))
        out["transport"] = type(blocking._transport).__name__

        # send (blocking, no stream)
        events = [ev async for ev in blocking.send_message(SendMessageRequest(message=msg("hello from python")))]
        out["send"] = [ev.WhichOneof("payload") for ev in events]
        task = events[-1].task
        out["send_task"] = d(task)

        # stream, in the first task's context: an anonymous caller lists only a context it holds
        events = [ev async for ev in streaming.send_message(SendMessageRequest(
            message=msg("stream from python", context_id=task.context_id)))]
        out["stream"] = [ev.WhichOneof("payload") for ev in events]
        out["stream_events"] = [d(ev) for ev in events]

        # get, list
        got = await blocking.get_task(GetTaskRequest(id=task.id))
        out["get"] = d(got)
        listed = await blocking.list_tasks(ListTasksRequest(page_size=10, context_id=task.context_id))
        out["list"] = d(listed)

        # multi-turn: input required, then answered in the same task
        events = [ev async for ev in blocking.send_message(SendMessageRequest(message=msg("need input please")))]
        asking = events[-1].task
        out["asking"] = d(asking)
        events = [ev async for ev in blocking.send_message(SendMessageRequest(
            message=msg("here is the answer", task_id=asking.id, context_id=asking.context_id)))]
        out["answered"] = d(events[-1].task)

        # subscribe, drop the stream, reconnect, then cancel: the reconnected stream sees it
        events = [ev async for ev in blocking.send_message(SendMessageRequest(message=msg("need input again")))]
        waiting = events[-1].task
        first = None
        async for ev in streaming.subscribe(SubscribeToTaskRequest(id=waiting.id)):
            first = d(ev)
            break
        out["subscribe_first"] = first
        seen = []
        subscribed = asyncio.Event()

        async def follow():
            async for ev in streaming.subscribe(SubscribeToTaskRequest(id=waiting.id)):
                seen.append(d(ev))
                subscribed.set()

        follower = asyncio.create_task(follow())
        await asyncio.wait_for(subscribed.wait(), 10)
        canceled = await blocking.cancel_task(CancelTaskRequest(id=waiting.id))
        out["cancel"] = d(canceled)
        await asyncio.wait_for(follower, 10)
        out["resubscribed"] = seen
        try:
            await blocking.cancel_task(CancelTaskRequest(id=waiting.id))
            out["cancel_again"] = "accepted"
        except Exception as e:  # noqa: BLE001
            out["cancel_again"] = type(e).__name__ + ": " + str(e)
        try:
            await blocking.get_task(GetTaskRequest(id="no-such-task"))
            out["get_unknown"] = "found"
        except Exception as e:  # noqa: BLE001
            out["get_unknown"] = type(e).__name__ + ": " + str(e)
        await blocking.close()
        await streaming.close()
    print(json.dumps(out))


async def auth(base, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        client = await create_client(base, client_config=ClientConfig(streaming=False, httpx_client=http))
        try:
            events = [ev async for ev in client.send_message(SendMessageRequest(message=msg("hello with a token")))]
            out = {"state": d(events[-1].task)["status"]["state"]}
        except Exception as e:  # noqa: BLE001
            out = {"error": type(e).__name__ + ": " + str(e)}
    print(json.dumps(out))


async def push(base, webhook):
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(base, client_config=ClientConfig(streaming=False, httpx_client=http))
        events = [ev async for ev in client.send_message(SendMessageRequest(message=msg("need input for push")))]
        task = events[-1].task
        cfg = await client.create_task_push_notification_config(TaskPushNotificationConfig(
            task_id=task.id, url=webhook, token="sdk-token",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="sdk-secret")))
        events = [ev async for ev in client.send_message(SendMessageRequest(
            message=msg("the answer", task_id=task.id, context_id=task.context_id)))]
        print(json.dumps({"task_id": task.id, "config": d(cfg), "final": d(events[-1].task)["status"]["state"]}))


def policy_of(task):
    for p in task.get("status", {}).get("message", {}).get("parts", []):
        data = p.get("data")
        if isinstance(data, dict) and data.get("type") == "policy":
            return data["policy"]
    return None


async def policy(base, ext):
    out = {}
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        out["extensions"] = [e.uri for e in card.capabilities.extensions]
        client = await create_client(card, client_config=ClientConfig(streaming=False, httpx_client=http))

        async def send(m):
            events = [ev async for ev in client.send_message(SendMessageRequest(message=m))]
            return events[-1].task

        asking = await send(msg("need consent"))
        out["asking"] = d(asking)
        part = policy_of(out["asking"])
        out["policy"] = part
        answer = msg("yes, I agree", task_id=asking.id, context_id=asking.context_id)
        answer.metadata.update({ext: {"state": part["state"]}})
        out["done"] = d(await send(answer))

        again = await send(msg("need consent again", context_id=asking.context_id))
        replay = msg("again", task_id=again.id, context_id=again.context_id)
        replay.metadata.update({ext: {"state": part["state"]}})
        try:
            out["replay"] = d(await send(replay))
        except Exception as e:  # noqa: BLE001
            out["replay"] = type(e).__name__ + ": " + str(e)
        await client.close()
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "policy":
        asyncio.run(policy(sys.argv[2], sys.argv[3]))
    elif sys.argv[1] == "auth":
        asyncio.run(auth(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
    elif sys.argv[1] == "push":
        asyncio.run(push(sys.argv[2], sys.argv[3]))
    else:
        asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
