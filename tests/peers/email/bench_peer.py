"""The comparison pipeline for bench/email.rs: aiosmtpd doing switchboard's inbound work in
Python. bench_peer.py PORT DB NAME TXT [NAME TXT ...]

For every message, as switchboard does before its 250: SPF for the MAIL FROM and the HELO
identity (pyspf), DKIM (dkimpy), ARC (dkimpy), DMARC alignment of the From domain against the
passing DKIM and SPF domains with the published policy, a MIME parse (the standard library's
`email` package) that extracts the subject and the text body, and one SQLite commit (WAL,
synchronous=NORMAL) storing the whole message and its text. DNS answers are the NAME TXT pairs
given on the command line and nothing else. A message failing DMARC under p=reject is answered
550. Prints 'ready' once listening.
"""
import asyncio
import email
import email.policy
import sqlite3
import sys

import dkim
import spf
from aiosmtpd.controller import Controller


class Handler:
    def __init__(self, db, records):
        self.db = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, rcpt TEXT, sender TEXT,"
            " subject TEXT, text TEXT, auth TEXT, body BLOB)"
        )
        self.records = {k.rstrip(".").lower(): v for k, v in records.items()}
        self.shown = False
        spf.DNSLookup = self.spf_dns

    def txt(self, name):
        return self.records.get(name.rstrip(".").lower())

    def dnsfunc(self, qname, timeout=5):
        name = qname.decode() if isinstance(qname, bytes) else qname
        found = self.txt(name)
        return found.encode() if found is not None else b""

    def spf_dns(self, name, qtype, tcpfallback=True, timeout=30):
        found = self.txt(name) if qtype in ("TXT", "SPF") else None
        return [((name, qtype), (found.encode(),))] if found is not None else []

    def dmarc(self, from_domain, dkim_domain, spf_domain):
        record = self.txt("_dmarc." + from_domain) or ""
        tags = dict(
            t.strip().split("=", 1) for t in record.split(";") if "=" in t
        )
        if tags.get("v") != "DMARC1":
            return "none", "none"

        def aligned(d):
            return d is not None and (d == from_domain or d.endswith("." + from_domain))

        ok = aligned(dkim_domain) or aligned(spf_domain)
        return ("pass" if ok else "fail"), tags.get("p", "none")

    async def handle_DATA(self, server, session, envelope):
        data = envelope.original_content or envelope.content
        ip, helo, mail_from = session.peer[0], session.host_name or "", envelope.mail_from or ""
        spf_mail = spf.check2(i=ip, s=mail_from, h=helo)[0]
        spf_helo = spf.check2(i=ip, s="postmaster@" + helo, h=helo)[0]
        d = dkim.DKIM(data)
        dkim_ok = d.verify(dnsfunc=self.dnsfunc)
        dkim_domain = d.domain.decode().lower() if dkim_ok and d.domain else None
        arc = dkim.arc_verify(data, dnsfunc=self.dnsfunc)[0]
        arc = arc.decode() if isinstance(arc, bytes) else str(arc)
        msg = email.message_from_bytes(data, policy=email.policy.default)
        sender = msg["From"].addresses[0] if msg["From"] and msg["From"].addresses else None
        from_domain = sender.domain.lower() if sender else ""
        spf_domain = mail_from.rsplit("@", 1)[-1].lower() if spf_mail == "pass" else None
        dmarc, policy = self.dmarc(from_domain, dkim_domain, spf_domain)
        if dmarc == "fail" and policy == "reject":
            return "550 5.7.1 DMARC policy rejects this message"
        part = msg.get_body(preferencelist=("plain", "html"))
        text = part.get_content() if part is not None else ""
        auth = f"spf={spf_mail} spf-helo={spf_helo} dkim={'pass' if dkim_ok else 'fail'} arc={arc} dmarc={dmarc}"
        if not self.shown:
            # Once per run, so the benchmark's output shows what the peer really checked.
            print(f"peer: first message: {auth}", file=sys.stderr, flush=True)
            self.shown = True
        self.db.execute("BEGIN")
        self.db.execute(
            "INSERT INTO messages (rcpt, sender, subject, text, auth, body) VALUES (?, ?, ?, ?, ?, ?)",
            (",".join(envelope.rcpt_tos), str(sender), str(msg["Subject"]), text, auth, data),
        )
        self.db.execute("COMMIT")
        return "250 2.0.0 OK"


def main():
    port, db = int(sys.argv[1]), sys.argv[2]
    pairs = sys.argv[3:]
    records = dict(zip(pairs[0::2], pairs[1::2]))
    ctl = Controller(Handler(db, records), hostname="127.0.0.1", port=port)
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
