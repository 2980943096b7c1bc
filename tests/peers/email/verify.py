"""Verifies a message's DKIM signature with dkimpy, without DNS: verify.py MSG NAME TXT [IDX].

The DNS answer for NAME (e.g. b'sel._domainkey.example.org.') is TXT. IDX (default 0, the
topmost) picks the DKIM-Signature header to verify. Prints 'pass' or 'fail' and the signature's
d= and s= tags; exits 0 on pass, 1 on fail.
"""
import sys

import dkim


def main():
    path, name, txt = sys.argv[1:4]
    idx = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    with open(path, "rb") as f:
        msg = f.read()
    want = name.rstrip(".").encode().lower()

    def dnsfunc(qname, timeout=5):
        got = qname.rstrip(b".").lower() if isinstance(qname, bytes) else qname.rstrip(".").encode().lower()
        return txt.encode() if got == want else b""

    d = dkim.DKIM(msg)
    ok = d.verify(idx=idx, dnsfunc=dnsfunc)
    print("pass" if ok else "fail", (d.domain or b"").decode(), (d.selector or b"").decode())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
