// Drives switchboard with the @a2a-js/sdk 1.3.0 client and prints what it saw as one JSON
// object. Usage: node client.mjs BASE_URL [TOKEN]. The agent answers like echo, and asks for
// input (TASK_STATE_INPUT_REQUIRED) when a message contains "need input". With A2A_BINDING set
// (`HTTP+JSON`) the client speaks that binding of the card instead of the SDK's first choice.
import { randomUUID } from 'node:crypto';
import { ClientFactory, ClientFactoryOptions } from '@a2a-js/sdk/client';
import {
  CancelTaskRequest, GetTaskRequest, ListTasksRequest, SendMessageRequest,
  StreamResponse, SubscribeToTaskRequest, Task,
} from '@a2a-js/sdk';

const args = process.argv.slice(2);
if (args[0] === 'auth') {
  // node client.mjs auth BASE_URL [TOKEN]: one message, the outcome printed.
  const [, base, token] = args;
  const opts = token ? { serviceParameters: { Authorization: `Bearer ${token}` } } : {};
  const client = await new ClientFactory().createFromUrl(base);
  let out;
  try {
    const t = await client.sendMessage(SendMessageRequest.fromJSON({
      message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text: 'hello with a token' }] },
    }), opts);
    out = { state: Task.toJSON(t).status.state };
  } catch (e) {
    out = { error: `${e.constructor.name}: ${e.message}` };
  }
  // Exit once the line is written: writes to a pipe are asynchronous on POSIX, and an exit
  // right after console.log can lose them (the test then reads nothing).
  await new Promise((written) => process.stdout.write(JSON.stringify(out) + '\n', written));
  process.exit(0);
}
const [base, token] = args;
const opts = token ? { serviceParameters: { Authorization: `Bearer ${token}` } } : {};
const msg = (text, extra = {}) => SendMessageRequest.fromJSON({
  message: { messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra },
});
const taskJson = (t) => Task.toJSON(t);
const out = {};

const binding = process.env.A2A_BINDING;
const factory = binding
  ? new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: [binding] }))
  : new ClientFactory();
const client = await factory.createFromUrl(base);
out.transport = client.transport.constructor.name;
const card = await client.getAgentCard(opts);
out.card = { name: card.name, streaming: card.capabilities?.streaming, url: card.supportedInterfaces?.[0]?.url };

const sent = await client.sendMessage(msg('hello from node'), opts);
out.send = taskJson(sent);

const events = [];
// In the first task's context: an anonymous caller lists only a context it holds.
for await (const ev of client.sendMessageStream(msg('stream from node', { contextId: sent.contextId }), opts)) {
  events.push(StreamResponse.toJSON(ev));
}
out.stream = events;

out.get = taskJson(await client.getTask(GetTaskRequest.fromJSON({ id: sent.id }), opts));
const listed = await client.listTasks(ListTasksRequest.fromJSON({ pageSize: 10, contextId: sent.contextId }), opts);
out.list = { ids: listed.tasks.map((t) => t.id), totalSize: listed.totalSize, nextPageToken: listed.nextPageToken };

const asking = await client.sendMessage(msg('need input please'), opts);
out.asking = taskJson(asking);
const answered = await client.sendMessage(
  msg('here is the answer', { taskId: asking.id, contextId: asking.contextId }), opts);
out.answered = taskJson(answered);

const waiting = await client.sendMessage(msg('need input again'), opts);
const seen = [];
let subscribed;
const firstEvent = new Promise((r) => { subscribed = r; });
const follower = (async () => {
  for await (const ev of client.resubscribeTask(SubscribeToTaskRequest.fromJSON({ id: waiting.id }), opts)) {
    seen.push(StreamResponse.toJSON(ev));
    subscribed();
  }
})();
await firstEvent;
out.cancel = taskJson(await client.cancelTask(CancelTaskRequest.fromJSON({ id: waiting.id }), opts));
await follower;
out.resubscribed = seen;
try {
  await client.getTask(GetTaskRequest.fromJSON({ id: 'no-such-task' }), opts);
  out.get_unknown = 'found';
} catch (e) {
  out.get_unknown = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
