"""An HTTPS server of MTA-STS policies: sts_server.py PORT CERT KEY DIR.

GET /.well-known/mta-sts.txt answers with DIR/{host}.txt (the Host header without its port)
as text/plain, or 404; each such request is appended to DIR/fetches.log as its host. Prints
'ready' once listening on 127.0.0.1:PORT.
"""
import http.server
import os
import ssl
import sys


def main():
    port, cert, key, root = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            host = (self.headers.get("Host") or "").split(":")[0].lower()
            path = os.path.join(root, host + ".txt")
            if self.path != "/.well-known/mta-sts.txt" or not os.path.isfile(path):
                self.send_error(404)
                return
            with open(os.path.join(root, "fetches.log"), "a") as log:
                log.write(host + "\n")
            with open(path, "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
