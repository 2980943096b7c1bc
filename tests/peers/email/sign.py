"""Signs a message with dkimpy: sign.py KEY SELECTOR DOMAIN IN OUT [ALGO].

Writes the DKIM-Signature header dkimpy returns followed by the message, exactly as a signing
MTA would. ALGO is rsa-sha256 (default) or rsa-sha1.
"""
import sys

import dkim


def main():
    key_path, selector, domain, src, dst = sys.argv[1:6]
    algo = sys.argv[6] if len(sys.argv) > 6 else "rsa-sha256"
    with open(key_path, "rb") as f:
        key = f.read()
    with open(src, "rb") as f:
        msg = f.read()
    sig = dkim.sign(
        msg,
        selector.encode(),
        domain.encode(),
        key,
        canonicalize=(b"relaxed", b"relaxed"),
        signature_algorithm=algo.encode(),
        include_headers=[b"from", b"to", b"cc", b"subject", b"date", b"message-id",
                         b"in-reply-to", b"references"],
    )
    with open(dst, "wb") as f:
        f.write(sig + msg)


if __name__ == "__main__":
    main()
