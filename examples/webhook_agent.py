"""A switchboard webhook agent in Python (standard library only).

    WEBHOOK_SECRET=change-me PORT=9000 python3 webhook_agent.py

switchboard POSTs each NormalizedMessage (with its history) here, signed; the agent answers
with a NormalizedResponse. See docs/webhook.md.
"""
import hashlib
import hmac
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ["WEBHOOK_SECRET"].encode()


def signed(headers, body):
    ts = headers.get("X-Switchboard-Timestamp", "")
    sig = headers.get("X-Switchboard-Signature", "")
    if not ts.isdigit() or abs(time.time() - int(ts)) > 300:
        return False  # missing or stale: a replay
    mac = hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(sig, "v1=" + mac)


class Agent(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not signed(self.headers, body):
            self.send_response(401)
            self.end_headers()
            return
        msg = json.loads(body)
        text = " ".join(p["content"] for p in msg["parts"] if p["kind"] == "text")
        if not text.strip():
            self.send_response(204)  # nothing to say: no reply is sent
            self.end_headers()
            return
        turns = len(msg.get("history") or [])
        who = msg["sender"].get("display_name") or msg["sender"]["address"]
        reply = f"Hello {who}, you said: {text.strip()}\n\n(earlier turns I can see: {turns})"
        answer = json.dumps({"parts": [{"kind": "text", "mime": "text/markdown", "content": reply}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "9000"))
    server = ThreadingHTTPServer(("127.0.0.1", port), Agent)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()
