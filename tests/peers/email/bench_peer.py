"""The comparison pipeline for bench/email.rs: aiosmtpd + dkimpy doing switchboard's inbound
work. bench_peer.py PORT DB NAME TXT

Every message is DKIM-verified with dkimpy (the DNS answer for NAME is TXT, nothing else
exists), stored in SQLite (WAL, synchronous=NORMAL, one commit per message) and only then
answered 250; a failed verification is answered 550. Prints 'ready' once listening.
"""
import asyncio
import sqlite3
import sys

import dkim
from aiosmtpd.controller import Controller


class Handler:
    def __init__(self, db, name, txt):
        self.db = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, rcpt TEXT, body BLOB)")
        self.name = name.rstrip(".").lower().encode()
        self.txt = txt.encode()

    def dnsfunc(self, qname, timeout=5):
        q = qname if isinstance(qname, bytes) else qname.encode()
        return self.txt if q.rstrip(b".").lower() == self.name else b""

    async def handle_DATA(self, server, session, envelope):
        data = envelope.original_content or envelope.content
        if not dkim.verify(data, dnsfunc=self.dnsfunc):
            return "550 5.7.1 DKIM verification failed"
        self.db.execute("BEGIN")
        self.db.execute("INSERT INTO messages (rcpt, body) VALUES (?, ?)", (",".join(envelope.rcpt_tos), data))
        self.db.execute("COMMIT")
        return "250 2.0.0 OK"


def main():
    port, db, name, txt = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    ctl = Controller(Handler(db, name, txt), hostname="127.0.0.1", port=port)
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
