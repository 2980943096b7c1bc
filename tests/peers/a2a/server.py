"""An echo agent on the a2a-sdk 1.3.0 server (Starlette + uvicorn), for switchboard's A2A client
backend test and the benchmark. Usage: server.py PORT.

It answers with one text artifact "echo: <text> [ctx=<contextId>] [task=<taskId>]", and asks for input
(TASK_STATE_INPUT_REQUIRED) when the text contains "need input".
"""

import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        text = context.get_user_input()
        if "need input" in text:
            await updater.requires_input(
                updater.new_agent_message([Part(text=f"what else? [ctx={task.context_id}] [task={task.id}]")])
            )
            return
        await updater.add_artifact([Part(text=f"echo: {text} [ctx={task.context_id}] [task={task.id}]")], name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def main(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="a2a-sdk echo",
        description="Echo agent on the a2a-sdk 1.3.0 server",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=base, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, rpc_url="/")
    app = Starlette(routes=routes)
    # uvicorn's fast configuration (one worker, uvloop, httptools), as an operator would run it.
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", loop="uvloop", http="httptools")


if __name__ == "__main__":
    main(int(sys.argv[1]))
