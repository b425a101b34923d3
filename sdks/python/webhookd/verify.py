"""verify(): check a delivery webhookd sent (Standard Webhooks signatures)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_TOLERANCE = 300


class WebhookVerificationError(Exception):
    """A delivery whose signature, timestamp or headers do not check out."""


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    get = getattr(headers, "get", None)
    if get is not None:
        v = get(name)
        if v is not None:
            return str(v)
    for k, v in headers.items():
        if k.lower() == name:
            return str(v)
    return None


def _key(secret: str) -> bytes:
    encoded = secret.removeprefix("whsec_")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise WebhookVerificationError("webhookd: the signing secret is not whsec_ + base64") from e
    if not raw:
        raise WebhookVerificationError("webhookd: the signing secret is empty")
    return raw


def sign(secret: str, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """The webhook-signature entry webhookd sends for one secret (for receivers' own tests)."""
    raw = body.encode() if isinstance(body, str) else body
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + raw, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def verify(body: bytes | str, headers: Mapping[str, Any], secret: str | Sequence[str], *,
           tolerance: int = DEFAULT_TOLERANCE, now: float | None = None) -> Any:
    """Verifies a delivery: the raw body as received, its headers (any mapping,
    e.g. Flask's request.headers), and the endpoint's secret (``whsec_...``) or
    both secrets during a rotation. Returns the parsed body; raises
    WebhookVerificationError when no signature matches any secret or
    webhook-timestamp is more than ``tolerance`` seconds (5 minutes) from now.
    Signatures are compared in constant time."""
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError("webhookd: missing webhook-id, webhook-timestamp or webhook-signature")
    if not ts.isdigit():
        raise WebhookVerificationError("webhookd: webhook-timestamp is not Unix seconds")
    current = int(time.time() if now is None else now)
    sent = int(ts)
    if current - sent > tolerance:
        raise WebhookVerificationError("webhookd: webhook-timestamp is too old")
    if sent - current > tolerance:
        raise WebhookVerificationError("webhookd: webhook-timestamp is too new")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    secrets = [secret] if isinstance(secret, str) else list(secret)
    ok = False
    for s in secrets:
        expected = sign(s, msg_id, sent, raw).encode()
        for entry in sigs.split(" "):
            if entry.startswith("v1,") and hmac.compare_digest(entry.encode(), expected):
                ok = True
    if not ok:
        raise WebhookVerificationError("webhookd: no signature matches")
    return json.loads(raw)
