// An echo agent on the @a2a-js/sdk 1.3.0 server (Express, in-memory store), for switchboard's
// A2A benchmark. Usage: node server.mjs PORT. Answers with one text artifact "echo: <text>".
import express from 'express';
import { randomUUID } from 'node:crypto';
import { Message, Part, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const port = Number(process.argv[2]);
const base = `http://127.0.0.1:${port}`;
const card = {
  name: 'a2a-js echo', description: 'Echo agent on the @a2a-js/sdk 1.3.0 server', version: '1.0.0',
  supportedInterfaces: [{ url: `${base}/`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  capabilities: { streaming: true }, defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
  skills: [{ id: 'echo', name: 'Echo', description: 'Echoes', tags: ['echo'] }],
};

const executor = {
  async execute(ctx, bus) {
    const msg = Message.toJSON(ctx.request.message);
    const text = (msg.parts || []).map((p) => p.text || '').join('');
    const { taskId, contextId } = ctx;
    if (!ctx.task) {
      bus.publish(AgentEvent.task(Task.fromJSON({
        id: taskId, contextId, status: { state: 'TASK_STATE_SUBMITTED' }, history: [msg],
      })));
    }
    bus.publish(AgentEvent.artifactUpdate(TaskArtifactUpdateEvent.fromJSON({
      taskId, contextId, artifact: { artifactId: randomUUID(), name: 'echo', parts: [{ text: `echo: ${text}` }] },
    })));
    bus.publish(AgentEvent.statusUpdate(TaskStatusUpdateEvent.fromJSON({
      taskId, contextId, status: { state: 'TASK_STATE_COMPLETED', timestamp: new Date().toISOString() },
    })));
    bus.finished();
  },
  async cancelTask() {},
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
const app = express();
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: async () => card }));
app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
app.listen(port, '127.0.0.1');
void Part;
