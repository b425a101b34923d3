"""Pacing on X-RateLimit-Remaining / X-RateLimit-Reset, shared by every call of one client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from .retry import parse_retry_after

MAX_PACE_WAIT = 120.0


class Pacer:
    """Keeps one client under the project's rate limit, as the Go client does.

    Every answer's X-RateLimit-Limit, -Remaining and -Reset update it; before
    each request it takes one of the remaining requests. When only a few are
    left (5, or a quarter of a small limit) callers wait for a slot each, one
    per the time the limit takes to win back one request, so a long loop runs
    at the limit's steady rate instead of into 429; when none are left (or a
    429 said so) everyone waits for the reset. Thread-safe.
    """

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._now = now
        self._known = False
        self._remaining = 0
        self._reset = 0.0
        self._limit = 0
        self._in_flight = 0
        self._next_slot = 0.0

    def _low(self) -> int:
        return min(5, self._limit // 4) if self._limit > 0 else 5

    def wait(self, sleep: Callable[[float], None]) -> None:
        """Blocks (through sleep, which raises when the call is cancelled) until a request may go."""
        while True:
            with self._lock:
                now = self._now()
                if self._known and now >= self._reset:
                    self._known = False
                if not self._known or self._remaining > self._low():
                    self._take()
                    return
                if self._remaining <= 0 or self._limit <= self._remaining:
                    delay = min(self._reset - now, MAX_PACE_WAIT)
                    slot = None
                else:
                    interval = (self._reset - now) / (self._limit - self._remaining)
                    slot = self._next_slot + interval if self._next_slot > now else now + interval
                    slot = min(slot, now + MAX_PACE_WAIT)
                    self._next_slot = slot
                    delay = slot - now
            sleep(delay)
            if slot is not None:
                with self._lock:
                    self._take()
                return

    def _take(self) -> None:
        self._remaining -= 1
        self._in_flight += 1

    def done(self, status: int | None, headers: Mapping[str, str] | None) -> None:
        """Records the end of a request, and what its answer (None: none came) says."""
        with self._lock:
            self._in_flight -= 1
            if status is None or headers is None:
                return
            h = {k.lower(): v for k, v in headers.items()}
            try:
                remaining = int(h["x-ratelimit-remaining"])
                reset = int(h["x-ratelimit-reset"])
            except (KeyError, ValueError):
                return
            try:
                self._limit = int(h["x-ratelimit-limit"])
            except (KeyError, ValueError):
                pass
            self._known = True
            # Requests still in flight may not be counted in this answer yet.
            self._remaining = remaining - self._in_flight
            self._reset = float(reset)
            if status == 429:
                ra = parse_retry_after(h.get("retry-after"), self._now())
                if ra is not None:
                    self._remaining, self._reset = 0, self._now() + ra
