"""The independent verifier of crates/searchwire/tests/sigv4.rs: botocore (the AWS SDK for
Python's signer) signs each request searchwire sent, as recorded by a fake node, and
prints the Authorization header it computes, one JSON line per request.

Input (stdin, JSON): {"access_key", "secret_key", "token", "region", "service",
"requests": [{"method", "url", "headers": [[name, value]...], "body_hex"}]}.
Only the recorded X-Amz-Date is taken from searchwire (botocore's clock is set to it); the
body hash, the canonical request and the signature are botocore's own.
"""
import datetime
import hashlib
import json
import sys

import botocore.auth
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

spec = json.load(sys.stdin)
creds = Credentials(spec["access_key"], spec["secret_key"], spec["token"])
# Headers botocore sets itself (from its clock, its token, its own body hash).
OWN = {"authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
for r in spec["requests"]:
    headers = dict((k.lower(), v) for k, v in r["headers"])
    signed = headers["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    when = datetime.datetime.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.timezone.utc
    )
    botocore.auth.get_current_datetime = lambda when=when: when
    body = bytes.fromhex(r["body_hex"])
    req = AWSRequest(
        method=r["method"],
        url=r["url"],
        data=body,
        headers={k: v for k, v in headers.items() if k in signed and k not in OWN},
    )
    auth = SigV4Auth(creds, spec["service"], spec["region"])
    # The body hash header, computed by botocore from the body it was given.
    req.headers["X-Amz-Content-SHA256"] = auth.payload(req)
    auth.add_auth(req)
    print(
        json.dumps(
            {
                "authorization": req.headers["Authorization"],
                "body_sha256": hashlib.sha256(body).hexdigest(),
            }
        )
    )
