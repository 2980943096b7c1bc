// A switchboard webhook agent in TypeScript, on Node's standard library (Node 22.18 or later
// runs .ts files directly):
//
//     WEBHOOK_SECRET=change-me PORT=9001 node webhook_agent.ts
//
// switchboard POSTs each NormalizedMessage (with its history) here, signed; the agent answers
// with a stream of ResponseEvents, so a streaming A2A caller sees the words as they come.
// See docs/webhook.md.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";

type Part = { kind: string; mime?: string; content?: string };
type Message = { sender: { address: string; display_name?: string }; parts: Part[]; history?: unknown[] };

const secret = process.env.WEBHOOK_SECRET ?? "";

function signed(req: IncomingMessage, body: Buffer): boolean {
  const ts = String(req.headers["x-switchboard-timestamp"] ?? "");
  const sig = Buffer.from(String(req.headers["x-switchboard-signature"] ?? ""));
  if (!/^\d+$/.test(ts) || Math.abs(Date.now() / 1000 - Number(ts)) > 300) return false;
  const mac = "v1=" + createHmac("sha256", secret).update(`${ts}.`).update(body).digest("hex");
  return sig.length === mac.length && timingSafeEqual(sig, Buffer.from(mac));
}

createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const body = Buffer.concat(chunks);
  if (!signed(req, body)) return void res.writeHead(401).end();
  const msg = JSON.parse(body.toString()) as Message;
  const text = msg.parts.filter((p) => p.kind === "text").map((p) => p.content).join(" ").trim();
  if (!text) return void res.writeHead(204).end(); // nothing to say: no reply is sent
  res.writeHead(200, { "Content-Type": "text/event-stream" });
  const send = (event: object) => res.write(`data: ${JSON.stringify(event)}\n\n`);
  const who = msg.sender.display_name ?? msg.sender.address;
  for (const word of `Hello ${who}, you said: ${text}`.split(" ")) send({ type: "delta", text: word + " " });
  send({ type: "done", response: { parts: [] } });
  res.end();
}).listen(Number(process.env.PORT ?? 9001), "127.0.0.1", () =>
  console.log(`listening on 127.0.0.1:${process.env.PORT ?? 9001}`),
);
