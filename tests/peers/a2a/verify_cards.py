"""Verifies A2A agent card signatures with libraries independent of switchboard: jwcrypto for
the JWS and the key set, rfc8785 for the canonical form.

Reads {"jwks": {...}, "cards": {name: card}} on stdin and prints one JSON object: for each
card its protected header and whether its signature verifies, and the same for a copy of it
with its description changed (which must not verify).
"""

import base64
import copy
import json
import sys

import rfc8785
from jwcrypto import jwk, jws


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check(card, keyset):
    card = copy.deepcopy(card)
    signatures = card.pop("signatures", None) or []
    if not signatures:
        return {"verified": False, "why": "unsigned"}
    entry = signatures[0]
    header = json.loads(b64url_decode(entry["protected"]))
    key = keyset.get_key(header.get("kid"))
    if key is None:
        return {"verified": False, "why": "no key", "header": header}
    token = jws.JWS()
    # The detached form: the compact serialization with an empty payload.
    token.deserialize(entry["protected"] + ".." + entry["signature"])
    try:
        token.verify(key, alg=header["alg"], detached_payload=rfc8785.dumps(card))
    except jws.InvalidJWSSignature as e:
        return {"verified": False, "why": str(e), "header": header}
    return {"verified": True, "header": header}


def main():
    data = json.load(sys.stdin)
    keyset = jwk.JWKSet.from_json(json.dumps(data["jwks"]))
    out = {}
    for name, card in data["cards"].items():
        tampered = copy.deepcopy(card)
        tampered["description"] = tampered.get("description", "") + " (changed)"
        out[name] = {"card": check(card, keyset), "tampered": check(tampered, keyset)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
