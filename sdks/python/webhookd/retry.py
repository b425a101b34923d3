"""Retry policy, backoff and Retry-After, as the Go client has them."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried."""

    max_attempts: int = 5
    """Tries of one call, the first included; 1 turns retries off."""
    base_delay: float = 0.25
    """Backoff ceiling (seconds) before the second try; doubled for each later one."""
    max_delay: float = 30.0
    """Cap of the backoff (not of Retry-After), seconds."""
    max_retry_after: float = 120.0
    """The longest Retry-After waited out; a longer one ends the call with that answer."""
    per_try_timeout: float = 40.0
    """Bound of one try, seconds; a try that runs out is retried (the API bounds its work at 30 s)."""


def backoff(policy: RetryPolicy, n: int, rand: random.Random | None = None) -> float:
    """The wait before try n+1 after try n failed without a Retry-After: full
    jitter, uniform in [0, min(max_delay, base_delay * 2**(n-1))]."""
    ceiling = min(policy.max_delay, policy.base_delay * 2 ** min(n - 1, 30))
    return (rand or random).uniform(0, ceiling)


def after_retry_after(seconds: float, rand: random.Random | None = None) -> float:
    """The wait for a Retry-After: never less, plus up to a fifth more."""
    return seconds + (rand or random).uniform(0, seconds / 5 + 0.001)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Reads Retry-After (seconds or an HTTP date) as seconds; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value), 2**30))
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(when - (time.time() if now is None else now), 0.0)
