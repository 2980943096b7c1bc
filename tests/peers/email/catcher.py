"""An aiosmtpd server that stores every message it receives:
catcher.py PORT DIR [CODE [HOST [CERT KEY]]].

Each message becomes DIR/N.eml (the bytes as received) and DIR/N.env (MAIL FROM on the first
line, then one RCPT TO per line). CODE (default 250) is the reply to DATA, so tests can make
the catcher refuse (451 temporary, 550 permanent). HOST is the address to listen on
(127.0.0.1). With CERT and KEY it offers STARTTLS, and a message that came over TLS also gets
DIR/N.tls. Prints 'ready' once listening.
"""
import asyncio
import os
import ssl
import sys

from aiosmtpd.controller import Controller


class Handler:
    def __init__(self, out, code):
        self.out = out
        self.code = code
        self.n = 0

    async def handle_DATA(self, server, session, envelope):
        if self.code != 250:
            return f"{self.code} {'4.3.0 try later' if self.code < 500 else '5.7.1 refused'}"
        self.n += 1
        base = os.path.join(self.out, str(self.n))
        data = envelope.original_content or envelope.content
        with open(base + ".tmp", "wb") as f:
            f.write(data)
        with open(base + ".env", "w") as f:
            f.write("\n".join([envelope.mail_from] + list(envelope.rcpt_tos)) + "\n")
        if session.ssl is not None:
            with open(base + ".tls", "w") as f:
                f.write("tls\n")
        os.rename(base + ".tmp", base + ".eml")
        return "250 OK"


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    code = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    host = sys.argv[4] if len(sys.argv) > 4 else "127.0.0.1"
    tls = None
    if len(sys.argv) > 6:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(sys.argv[5], sys.argv[6])
    os.makedirs(out, exist_ok=True)
    ctl = Controller(
        Handler(out, code),
        hostname=host,
        port=port,
        enable_SMTPUTF8=True,
        tls_context=tls,
        require_starttls=False,
    )
    ctl.start()
    print("ready", flush=True)
    try:
        asyncio.get_event_loop().run_until_complete(asyncio.Event().wait())
    except KeyboardInterrupt:
        pass
    finally:
        ctl.stop()


if __name__ == "__main__":
    main()
