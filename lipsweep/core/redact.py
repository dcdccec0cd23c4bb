"""Credentials in URIs: the one function that hides them wherever a URI is shown or stored.

A URI can carry a secret in its userinfo (``postgresql://user:<password>@host/db``) or in its
query (``postgresql://u@h/db?password=...``, ``s3://b/k?access_key=..&secret_key=..``,
``...?X-Amz-Signature=...``, ``?token=...``). :func:`redact_uri` replaces both by ``***`` in any
text: log lines, error lines, exports, MLflow params and Tune's pickled state. Torch-, Ray-
and MLflow-free.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s]*@")
SECRET_WORDS = ("pass", "pwd", "token", "secret", "key", "sig", "credential", "auth")
"""A query parameter whose name holds one of these (any case) carries a credential:
password, passwd, pwd, token, session_token, secret, secret_key, access_key, api_key, key,
sig, X-Amz-Signature, X-Amz-Credential, auth, ..."""
_QUERY = re.compile(
    r"([?&;])([^=&;#\s]*(?:" + "|".join(SECRET_WORDS) + r")[^=&;#\s]*)=([^&;#\s]*)",
    re.IGNORECASE,
)


def redact_uri(text: object) -> str:
    """``text`` with the userinfo (``user:password@``) of every URI in it replaced by ``***@``
    and the value of every credential query parameter (:data:`SECRET_WORDS`) by ``***``."""
    return _QUERY.sub(r"\1\2=***", _USERINFO.sub(r"\1***@", str(text)))
