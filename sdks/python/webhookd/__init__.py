"""webhookd client for Python: send events with the Go client's safe defaults
(an Idempotency-Key per operation reused on every retry, full-jitter backoff,
Retry-After, pacing, typed errors, cursor iterators), and verify deliveries."""

from .client import ROUTES, VERSION, Client, NewEvent
from .outbox import OUTBOX_INSERT, outbox, outbox_insert
from .errors import WebhookdCancelledError, WebhookdError, WebhookdNetworkError
from .retry import RetryPolicy, backoff, parse_retry_after
from .verify import WebhookVerificationError, sign, verify

__all__ = ["Client", "NewEvent", "ROUTES", "VERSION", "RetryPolicy", "WebhookdError", "WebhookdCancelledError",
           "WebhookdNetworkError", "WebhookVerificationError", "backoff", "parse_retry_after", "sign", "verify",
           "OUTBOX_INSERT", "outbox", "outbox_insert"]
