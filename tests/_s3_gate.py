"""A local S3 endpoint that enforces IAM identity policies as AWS does.

moto serves S3 on 127.0.0.1; :class:`PolicyGate` sits in front of it and decides each request
from the caller's policies before moto sees it. moto's own IAM check cannot stand in: it
authorises HeadBucket as ``s3:HeadBucket`` (AWS authorises it as ``s3:ListBucket``) and ignores
every condition operator but ``StringEquals``, so a ``StringLike`` on ``s3:prefix`` never denies
there, which is exactly the rule that killed the driver (apache/arrow#49949).

What the gate implements, from the AWS documentation ("Policy evaluation logic", "Required
permissions for Amazon S3 API operations", "Amazon S3 condition key examples"):

- an explicit Deny wins, then any Allow, else the request is denied;
- ``Action``/``Resource`` match as case-insensitive / case-sensitive globs (``*``, ``?``; ``*``
  spans ``/``);
- conditions ``String(Not)Equals`` and ``String(Not)Like``, with ``IfExists``: a key absent from
  the request matches no positive operator (and every negated one) unless ``IfExists``; any other
  operator raises, so a policy the gate cannot judge fails the test instead of passing it;
- the operation -> permission table :func:`required_permissions` (``s3:prefix`` is present only
  on a list request that carries ``prefix``; HeadBucket has none).

Callers are told apart by the access key id of their SigV4 signature (header or presigned
query); signatures are not verified. Requests must be path-style (the clients here use a
127.0.0.1 endpoint, which forces it).
"""

from __future__ import annotations

import fnmatch
import io
import json
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

ACCOUNT = "123456789012"  # moto's default account
ADMIN_KEY = "LSTESTADMIN"  # test setup (creating the bucket); never judged

Context = dict[str, str]


@dataclass(frozen=True)
class Permission:
    """What one S3 operation needs: an IAM action on a resource, with its condition context."""

    action: str
    resource: str
    context: Context = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One request the gate judged."""

    principal: str
    operation: str  # e.g. "PUT bucket/key"
    permissions: tuple[Permission, ...]
    allowed: bool


def load_policy(path: Path, bucket: str, account: str = ACCOUNT) -> dict[str, Any]:
    """A policy file of deploy/iam/ with its placeholders filled in."""
    text = path.read_text().replace("YOUR-BUCKET", bucket).replace("YOUR-ACCOUNT-ID", account)
    return json.loads(text)


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, fold: bool) -> bool:
    if fold:
        pattern, value = pattern.lower(), value.lower()
    return re.fullmatch(fnmatch.translate(pattern), value) is not None


def _condition(operator: str, key: str, expected: Any, context: Context) -> bool:
    base, if_exists = (operator[:-8], True) if operator.endswith("IfExists") else (operator, False)
    negated = base.startswith("StringNot")
    if base not in ("StringEquals", "StringNotEquals", "StringLike", "StringNotLike"):
        raise ValueError(f"condition operator {operator} is not implemented by the gate")
    if key not in context:
        return if_exists or negated
    like = base.endswith("Like")
    hit = any(
        _glob(v, context[key], fold=False) if like else v == context[key]
        for v in _as_list(expected)
    )
    return hit != negated


def _statement_applies(st: dict[str, Any], p: Permission) -> bool:
    if "Action" in st:
        if not any(_glob(a, p.action, fold=True) for a in _as_list(st["Action"])):
            return False
    elif any(_glob(a, p.action, fold=True) for a in _as_list(st["NotAction"])):
        return False
    if "Resource" in st:
        if not any(_glob(r, p.resource, fold=False) for r in _as_list(st["Resource"])):
            return False
    elif any(_glob(r, p.resource, fold=False) for r in _as_list(st["NotResource"])):
        return False
    return all(
        _condition(op, key, expected, p.context)
        for op, keys in st.get("Condition", {}).items()
        for key, expected in keys.items()
    )


def is_allowed(policies: list[dict[str, Any]], p: Permission) -> bool:
    """AWS's evaluation of identity policies: explicit Deny > Allow > implicit deny."""
    statements = [st for pol in policies for st in _as_list(pol["Statement"])]
    applying = [st for st in statements if _statement_applies(st, p)]
    if any(st["Effect"] == "Deny" for st in applying):
        return False
    return any(st["Effect"] == "Allow" for st in applying)


def required_permissions(
    method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
) -> tuple[str, list[Permission]]:
    """The S3 operation of a path-style request and the permissions AWS requires for it."""
    bucket, _, key = unquote(path).lstrip("/").partition("/")
    arn = f"arn:aws:s3:::{bucket}"
    obj = f"{arn}/{key}"
    op = f"{method} {bucket}/{key}" if key else f"{method} {bucket}"
    if not key:
        if method == "HEAD":  # HeadBucket
            return op, [Permission("s3:ListBucket", arn)]
        if method == "GET" and "location" in query:
            return op, [Permission("s3:GetBucketLocation", arn)]
        if method == "GET" and "uploads" in query:
            return op, [Permission("s3:ListBucketMultipartUploads", arn)]
        if method == "GET" and not set(query) - {
            "list-type",
            "prefix",
            "delimiter",
            "max-keys",
            "continuation-token",
            "start-after",
            "marker",
            "encoding-type",
            "fetch-owner",
        }:  # ListObjects(V2)
            ctx = {f"s3:{k}": query[k] for k in ("prefix", "delimiter", "max-keys") if k in query}
            return op, [Permission("s3:ListBucket", arn, ctx)]
        if method == "POST" and "delete" in query:  # DeleteObjects: s3:DeleteObject per key
            keys = [e.text or "" for e in ET.fromstring(body).iter() if e.tag.endswith("Key")]
            return op, [Permission("s3:DeleteObject", f"{arn}/{k}") for k in keys]
        if method == "PUT" and not query:
            return op, [Permission("s3:CreateBucket", arn)]
        if method == "DELETE" and not query:
            return op, [Permission("s3:DeleteBucket", arn)]
    else:
        if method in ("GET", "HEAD") and "uploadId" in query:
            return op, [Permission("s3:ListMultipartUploadParts", obj)]
        if method in ("GET", "HEAD") and not set(query) - {"partNumber", "versionId"}:
            return op, [Permission("s3:GetObject", obj)]
        if method == "DELETE":
            action = "s3:AbortMultipartUpload" if "uploadId" in query else "s3:DeleteObject"
            return op, [Permission(action, obj)]
        if method in ("PUT", "POST") and not set(query) - {"uploads", "uploadId", "partNumber"}:
            # PutObject, CreateMultipartUpload, UploadPart, CompleteMultipartUpload, CopyObject
            perms = [Permission("s3:PutObject", obj)]
            source = headers.get("x-amz-copy-source")
            if source:
                perms.append(Permission("s3:GetObject", f"arn:aws:s3:::{unquote(source)}"))
            return op, perms
    raise ValueError(f"S3 request {method} {path}?{query} is not in the gate's table")


_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied (lipsweep policy gate)</Message></Error>"
)


class PolicyGate:
    """WSGI app: judge each request by its caller's policies, pass the allowed ones to moto."""

    def __init__(self, backend: Callable, keys: dict[str, str], policies: dict[str, list]):
        self.backend = backend
        self.keys = keys  # access key id -> principal name
        self.policies = policies  # principal name -> policy documents
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def _principal(self, environ: dict[str, Any], query: dict[str, str]) -> str:
        auth = environ.get("HTTP_AUTHORIZATION", "") or query.get("X-Amz-Credential", "")
        m = re.search(r"(?:Credential=)?(\w+)/\d{8}/", auth)
        key = m.group(1) if m else ""
        if key == ADMIN_KEY:
            return "admin"
        return self.keys.get(key, f"unknown:{key}")

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Any:
        query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""), True).items()}
        principal = self._principal(environ, query)
        if principal == "admin":
            return self.backend(environ, start_response)
        body = b""
        if "delete" in query:  # DeleteObjects: the keys are in the body; moto reads it again
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
        headers = {
            k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")
        }
        op, perms = required_permissions(
            environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/"), query, headers, body
        )
        policies = self.policies.get(principal, [])
        allowed = bool(perms) and all(is_allowed(policies, p) for p in perms)
        with self._lock:
            self.calls.append(Call(principal, op, tuple(perms), allowed))
        if allowed:
            return self.backend(environ, start_response)
        start_response("403 Forbidden", [("Content-Type", "application/xml")])
        return [b"" if environ["REQUEST_METHOD"] == "HEAD" else _DENIED]

    def denied(self, principal: str | None = None) -> list[Call]:
        return [c for c in self.calls if not c.allowed and principal in (None, c.principal)]


@contextmanager
def serve(gate_factory: Callable[[Callable], PolicyGate]) -> Iterator[tuple[str, PolicyGate]]:
    """moto's S3 behind a gate, on 127.0.0.1 (a free port); yields (endpoint URL, gate)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    gate = gate_factory(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, gate, True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", gate
    finally:
        server.shutdown()
        thread.join()
