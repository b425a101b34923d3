"""Typed errors of the webhookd client."""

from __future__ import annotations

import json
from collections.abc import Mapping

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

_STATUS_CODES = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
                 429: "rate_limited", 502: "unavailable", 503: "unavailable", 504: "unavailable"}


class WebhookdError(Exception):
    """An answer of the API that was not a success (SPEC §2 error shape).

    After retries it describes the last answer; ``attempts`` says how many
    tries were made.
    """

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 request_id: str | None = None, existing_id: str | None = None, attempts: int = 1,
                 headers: Mapping[str, str] | None = None, body: bytes = b"") -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id
        self.existing_id = existing_id
        self.attempts = attempts
        self.headers = dict(headers or {})
        self.body = body
        text = f"webhookd: {status} {code}: {message}"
        if field:
            text += f" (field {field})"
        if request_id:
            text += f" [{request_id}]"
        if attempts > 1:
            text += f" after {attempts} tries"
        super().__init__(text)

    @property
    def temporary(self) -> bool:
        """Whether a later try might not get this answer (429, 5xx, a key in progress)."""
        return self.status in RETRYABLE_STATUS or self.code == "idempotency_key_in_progress"


class WebhookdCancelledError(Exception):
    """The call was cancelled or ran out of its overall deadline.

    ``last_error`` is the last answer's error, if a try got one.
    """

    def __init__(self, message: str, last_error: WebhookdError | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class WebhookdNetworkError(Exception):
    """No answer came after the last try (network error or per-try timeout)."""

    def __init__(self, message: str, attempts: int, last_error: WebhookdError | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.last_error = last_error


def error_from_response(status: int, headers: Mapping[str, str], body: bytes, attempts: int) -> WebhookdError:
    """Builds a WebhookdError from a non-2xx answer; a body that is not the
    API's error shape (a proxy's page) gets a code from the status."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        wire = json.loads(body).get("error")
    except (ValueError, AttributeError):
        wire = None
    if isinstance(wire, dict) and isinstance(wire.get("code"), str) and wire["code"]:
        return WebhookdError(status, wire["code"], str(wire.get("message", "")), field=wire.get("field"),
                             request_id=wire.get("request_id") or lower.get("x-request-id"),
                             existing_id=wire.get("existing_id"), attempts=attempts, headers=headers, body=body)
    code = _STATUS_CODES.get(status, "internal" if status >= 500 else f"http_{status}")
    return WebhookdError(status, code, f"HTTP {status}", request_id=lower.get("x-request-id"), attempts=attempts,
                         headers=headers, body=body)
