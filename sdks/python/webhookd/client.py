"""The webhookd API client."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import WebhookdCancelledError, WebhookdError, WebhookdNetworkError, error_from_response
from .pacer import Pacer
from .retry import RetryPolicy, after_retry_after, backoff, parse_retry_after

VERSION = "0.1.0"

#: Every route of /v1/openapi.json, by operationId: (method, path, client method).
#: A test holds this table, the client and the document together.
ROUTES: dict[str, tuple[str, str, str]] = {
    "createEvent": ("POST", "/v1/events", "send_event"),
    "createEventBatch": ("POST", "/v1/events/batch", "send_events"),
    "getEvent": ("GET", "/v1/events/{id}", "get_event"),
    "createEndpoint": ("POST", "/v1/endpoints", "create_endpoint"),
    "listEndpoints": ("GET", "/v1/endpoints", "list_endpoints"),
    "getEndpoint": ("GET", "/v1/endpoints/{id}", "get_endpoint"),
    "updateEndpoint": ("PATCH", "/v1/endpoints/{id}", "update_endpoint"),
    "deleteEndpoint": ("DELETE", "/v1/endpoints/{id}", "delete_endpoint"),
    "getEndpointSecret": ("GET", "/v1/endpoints/{id}/secret", "get_endpoint_secret"),
    "rotateEndpointSecret": ("POST", "/v1/endpoints/{id}/rotate-secret", "rotate_endpoint_secret"),
    "testEndpoint": ("POST", "/v1/endpoints/{id}/test", "test_endpoint"),
    "listDeliveries": ("GET", "/v1/deliveries", "list_deliveries"),
    "getDelivery": ("GET", "/v1/deliveries/{id}", "get_delivery"),
    "redeliver": ("POST", "/v1/deliveries/{id}/redeliver", "redeliver"),
    "listDeadLetters": ("GET", "/v1/dead-letters", "list_dead_letters"),
    "replayDeadLetters": ("POST", "/v1/dead-letters/replay", "replay_dead_letters"),
    "getJob": ("GET", "/v1/jobs/{id}", "get_job"),
    "listJobErrors": ("GET", "/v1/jobs/{id}/errors", "list_job_errors"),
    "cancelJob": ("POST", "/v1/jobs/{id}/cancel", "cancel_job"),
    "createEventsBulk": ("POST", "/v1/events/bulk", "send_events_bulk"),
    "testEndpointFilter": ("POST", "/v1/endpoints/{id}/filter/test", "test_endpoint_filter"),
    "testEndpointTransformation": ("POST", "/v1/endpoints/{id}/transformation/test", "test_endpoint_transformation"),
    "createPortalSession": ("POST", "/v1/portal-sessions", "create_portal_session"),
    "createEventType": ("POST", "/v1/event-types", "create_event_type"),
    "listEventTypes": ("GET", "/v1/event-types", "list_event_types"),
    "getEventType": ("GET", "/v1/event-types/{name}", "get_event_type"),
    "patchEventType": ("PATCH", "/v1/event-types/{name}", "update_event_type"),
    "deleteEventType": ("DELETE", "/v1/event-types/{name}", "archive_event_type"),
    "getOpenAPIDocument": ("GET", "/v1/openapi.json", "get_openapi_document"),
}


@dataclass
class NewEvent:
    """One event to send."""

    type: str
    data: Any
    external_id: str | None = None
    endpoint_ids: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "data"}


@dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    has_body: bool = False
    idempotency_key: str | None = None  # "" : make one
    headers: dict[str, str] = field(default_factory=dict)
    safe: bool = True  # False: retried only when the API certainly did not act (429, no connection)
    delete_call: bool = False
    ndjson: bytes | None = None  # an NDJSON body, sent as it is, instead of body
    ndjson_out: bool = False  # the answer is NDJSON: one value per line
    # An NDJSON body streamed as it is made (chunked); it can be read once, so the request makes one try.
    ndjson_stream: Iterable[bytes] | None = None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _enc(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _time(t: str | datetime | None) -> str | None:
    if isinstance(t, datetime):
        return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return t


class Client:
    """webhookd's API client.

    Safe to share between threads; every call made through one Client shares
    its pacing. Every mutating call sends an Idempotency-Key made once per
    call (or ``idempotency_key=``) and reuses it on every retry.

    Each call takes ``cancel`` (a threading.Event: setting it ends the call at
    its next wait, at once) and ``timeout`` (the call's overall deadline in
    seconds, retries and waits included).
    """

    def __init__(self, base_url: str, api_key: str, *, retry: RetryPolicy | None = None,
                 user_agent: str | None = None) -> None:
        u = urllib.parse.urlparse(base_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"webhookd: base URL {base_url!r} is not an absolute http(s) URL")
        if not api_key:
            raise ValueError("webhookd: API key is empty")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.retry = retry or RetryPolicy()
        self._user_agent = f"webhookd-python/{VERSION}" + (f" {user_agent}" if user_agent else "")
        self._pacer = Pacer()
        self._opener = urllib.request.build_opener(_NoRedirect)

    # ---- events

    def send_event(self, event: NewEvent | Mapping[str, Any], *, idempotency_key: str | None = None,
                   cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/events: one logical operation, created once however often it is retried."""
        body = event.to_json() if isinstance(event, NewEvent) else dict(event)
        return self._do(_Request("POST", "/v1/events", body=body, has_body=True, idempotency_key=idempotency_key or ""),
                        cancel, timeout)

    def send_events(self, events: list[NewEvent | Mapping[str, Any]], *, idempotency_key: str | None = None,
                    cancel: threading.Event | None = None, timeout: float | None = None) -> list[dict[str, Any]]:
        """POST /v1/events/batch: up to 1000 events, all or none, in order."""
        items = [e.to_json() if isinstance(e, NewEvent) else dict(e) for e in events]
        out = self._do(_Request("POST", "/v1/events/batch", body={"events": items}, has_body=True,
                                idempotency_key=idempotency_key or ""), cancel, timeout)
        return out["data"]

    def get_event(self, id: str, *, cancel: threading.Event | None = None,
                  timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/events/{id}."""
        return self._do(_Request("GET", f"/v1/events/{_enc(id)}"), cancel, timeout)

    # ---- endpoints

    def create_endpoint(self, endpoint: Mapping[str, Any], *, idempotency_key: str | None = None,
                        cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/endpoints; the answer carries the endpoint's secret."""
        return self._do(_Request("POST", "/v1/endpoints", body=dict(endpoint), has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def list_endpoints(self, *, limit: int | None = None, cancel: threading.Event | None = None,
                       timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """GET /v1/endpoints, every page."""
        return self._list("/v1/endpoints", {"limit": limit}, cancel, timeout)

    def get_endpoint(self, id: str, *, cancel: threading.Event | None = None,
                     timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/endpoints/{id}."""
        return self._do(_Request("GET", f"/v1/endpoints/{_enc(id)}"), cancel, timeout)

    def update_endpoint(self, id: str, patch: Mapping[str, Any], *, if_match: int | None = None,
                        cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """PATCH /v1/endpoints/{id}; with if_match only that version (else 412 version_mismatch)."""
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        return self._do(_Request("PATCH", f"/v1/endpoints/{_enc(id)}", body=dict(patch), has_body=True,
                                 headers=headers), cancel, timeout)

    def delete_endpoint(self, id: str, *, cancel: threading.Event | None = None, timeout: float | None = None) -> None:
        """DELETE /v1/endpoints/{id}; a retry that finds it gone succeeds."""
        self._do(_Request("DELETE", f"/v1/endpoints/{_enc(id)}", delete_call=True), cancel, timeout)

    def get_endpoint_secret(self, id: str, *, cancel: threading.Event | None = None,
                            timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/endpoints/{id}/secret."""
        return self._do(_Request("GET", f"/v1/endpoints/{_enc(id)}/secret"), cancel, timeout)

    def rotate_endpoint_secret(self, id: str, *, idempotency_key: str | None = None,
                               cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/endpoints/{id}/rotate-secret; the old secret keeps signing for 24 h."""
        return self._do(_Request("POST", f"/v1/endpoints/{_enc(id)}/rotate-secret", body={}, has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def test_endpoint(self, id: str, data: Any = None, *, cancel: threading.Event | None = None,
                      timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/endpoints/{id}/test. Not deduplicated by the API, so retried
        only when it certainly did not act (429, or no connection made)."""
        body = {} if data is None else {"data": data}
        return self._do(_Request("POST", f"/v1/endpoints/{_enc(id)}/test", body=body, has_body=True, safe=False),
                        cancel, timeout)

    # ---- deliveries, dead letters, jobs

    def list_deliveries(self, *, status: str | None = None, endpoint_id: str | None = None,
                        event_type: str | None = None, event_id: str | None = None,
                        since: str | datetime | None = None, limit: int | None = None,
                        cancel: threading.Event | None = None, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """GET /v1/deliveries, newest first, every page."""
        return self._list("/v1/deliveries", {"status": status, "endpoint_id": endpoint_id, "event_type": event_type,
                                             "event_id": event_id, "since": _time(since), "limit": limit},
                          cancel, timeout)

    def get_delivery(self, id: str, *, cancel: threading.Event | None = None,
                     timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/deliveries/{id}, with every attempt."""
        return self._do(_Request("GET", f"/v1/deliveries/{_enc(id)}"), cancel, timeout)

    def redeliver(self, id: str, *, idempotency_key: str | None = None, cancel: threading.Event | None = None,
                  timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/deliveries/{id}/redeliver: one manual attempt now."""
        return self._do(_Request("POST", f"/v1/deliveries/{_enc(id)}/redeliver", body={}, has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def list_dead_letters(self, *, endpoint_id: str | None = None, event_type: str | None = None,
                          since: str | datetime | None = None, until: str | datetime | None = None,
                          limit: int | None = None, cancel: threading.Event | None = None,
                          timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """GET /v1/dead-letters, every page."""
        return self._list("/v1/dead-letters", {"endpoint_id": endpoint_id, "event_type": event_type,
                                               "since": _time(since), "until": _time(until), "limit": limit},
                          cancel, timeout)

    def replay_dead_letters(self, *, endpoint_id: str | None = None, event_type: str | None = None,
                            since: str | datetime | None = None, until: str | datetime | None = None,
                            idempotency_key: str | None = None, cancel: threading.Event | None = None,
                            timeout: float | None = None) -> str:
        """POST /v1/dead-letters/replay: a background job; returns its id."""
        body = {k: v for k, v in {"endpoint_id": endpoint_id, "event_type": event_type, "since": _time(since),
                                  "until": _time(until)}.items() if v is not None}
        out = self._do(_Request("POST", "/v1/dead-letters/replay", body=body, has_body=True,
                                idempotency_key=idempotency_key or ""), cancel, timeout)
        return out["job_id"]

    def get_job(self, id: str, *, cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/jobs/{id}."""
        return self._do(_Request("GET", f"/v1/jobs/{_enc(id)}"), cancel, timeout)

    def list_job_errors(self, id: str, *, cancel: threading.Event | None = None,
                        timeout: float | None = None) -> list[dict[str, Any]]:
        """GET /v1/jobs/{id}/errors: a bulk job's refused lines ``{"line","code","message","field"}``."""
        return self._do(_Request("GET", f"/v1/jobs/{_enc(id)}/errors", ndjson_out=True), cancel, timeout)

    def cancel_job(self, id: str, *, idempotency_key: str | None = None, cancel: threading.Event | None = None,
                   timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/jobs/{id}/cancel: a queued or running job ends canceled; a finished one comes back as it is."""
        return self._do(_Request("POST", f"/v1/jobs/{_enc(id)}/cancel", body={}, has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def send_events_bulk(self, events: Iterable[Mapping[str, Any]], *, idempotency_key: str | None = None,
                         cancel: threading.Event | None = None, timeout: float | None = None) -> str:
        """POST /v1/events/bulk: events ``{"type","data",...}`` as one background job (up to 100,000); returns
        its id once the whole body is stored. Follow it with get_job, its refused lines with list_job_errors."""
        body = b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events)
        out = self._do(_Request("POST", "/v1/events/bulk", ndjson=body, idempotency_key=idempotency_key or ""),
                       cancel, timeout)
        return out["job_id"]

    # ---- bulk jobs, streamed

    def stream_events_bulk(self, events: Iterable[NewEvent | Mapping[str, Any]], *, idempotency_key: str | None = None,
                           cancel: threading.Event | None = None, timeout: float | None = None) -> str:
        """POST /v1/events/bulk with events streamed: each is written as an NDJSON line while the request is sent
        (chunked), so neither the events nor the body are ever all in memory; returns the job's id once the API has
        stored the whole body. ``events`` may be any iterable, a generator reading a file or a cursor included.

        The events are read once, so this makes one try: after a temporary error (429, 5xx,
        WebhookdNetworkError) call it again with the same events and the same ``idempotency_key``, and the API
        answers with the job the first try made, if it made one. Follow the job with wait_job."""
        out = self._do(_Request("POST", "/v1/events/bulk", ndjson_stream=_ndjson_chunks(events, cancel),
                                idempotency_key=idempotency_key or ""), cancel, timeout)
        return out["job_id"]

    def wait_job(self, id: str, *, on_progress: Callable[[dict[str, Any]], None] | None = None,
                 interval: float = 0.25, max_interval: float = 5.0, cancel: threading.Event | None = None,
                 timeout: float | None = None) -> dict[str, Any]:
        """Follows a job (GET /v1/jobs/{id}) until it is finished (succeeded, failed or canceled) and returns it.
        Readings start ``interval`` seconds apart and back off (x1.5, up to ``max_interval``) while nothing
        changes; ``on_progress``, when given, is called with every reading whose status or counts (done, total,
        failed_count) changed, the finished job included. ``cancel`` and ``timeout`` bound the whole wait
        (WebhookdCancelledError)."""
        deadline = time.monotonic() + timeout if timeout is not None else None
        seen: dict[str, Any] | None = None
        wait = interval
        while True:
            left = deadline - time.monotonic() if deadline is not None else None
            if left is not None and left <= 0:
                raise WebhookdCancelledError(f"webhookd: wait for job {id}: deadline passed", None)
            j = self.get_job(id, cancel=cancel, timeout=left)
            changed = seen is None or any(seen.get(k) != j.get(k) for k in ("status", "done", "total", "failed_count"))
            if changed and on_progress is not None:
                on_progress(j)
            if j.get("status") in ("succeeded", "failed", "canceled"):
                return j
            wait = interval if changed else min(wait * 1.5, max(max_interval, interval))
            seen = j
            if deadline is not None and time.monotonic() + wait > deadline:
                raise WebhookdCancelledError(f"webhookd: wait for job {id}: deadline passed", None)
            if cancel is not None:
                if cancel.wait(wait):
                    raise WebhookdCancelledError(f"webhookd: wait for job {id}: cancelled", None)
            else:
                time.sleep(wait)

    def test_endpoint_filter(self, id: str, *, event_id: str | None = None, type: str | None = None,
                             data: Any = None, filter: Mapping[str, Any] | None = None,
                             cancel: threading.Event | None = None, timeout: float | None = None) -> bool:
        """POST /v1/endpoints/{id}/filter/test: whether the endpoint's filter (or ``filter``, one to try before
        saving it) matches a past event or a given type and data. Sends nothing."""
        body: dict[str, Any] = {k: v for k, v in {"event_id": event_id, "type": type, "filter": filter}.items()
                                if v is not None}
        if type is not None:
            body["data"] = data
        out = self._do(_Request("POST", f"/v1/endpoints/{_enc(id)}/filter/test", body=body, has_body=True),
                       cancel, timeout)
        return bool(out["match"])

    _UNSET: Any = object()

    def test_endpoint_transformation(self, id: str, *, event_id: str | None = None, type: str | None = None,
                                     data: Any = None, transformation: Any = _UNSET,
                                     cancel: threading.Event | None = None,
                                     timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/endpoints/{id}/transformation/test: the request the endpoint's transformation (or
        ``transformation``, one to try before saving it; None: none) makes of a past event or a given type and
        data, ``{"send", "url", "headers", "body"}`` (``send`` false: it cancels). Sends nothing. A script
        that fails raises the validation_failed error on the field transformation."""
        body: dict[str, Any] = {k: v for k, v in {"event_id": event_id, "type": type}.items() if v is not None}
        if type is not None:
            body["data"] = data
        if transformation is not Client._UNSET:
            body["transformation"] = transformation
        return self._do(_Request("POST", f"/v1/endpoints/{_enc(id)}/transformation/test", body=body, has_body=True),
                        cancel, timeout)

    # ---- event-type catalog, portal links

    def create_event_type(self, event_type: Mapping[str, Any], *, idempotency_key: str | None = None,
                          cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/event-types: adds an entry to the catalog ``{"name", "description"?, "schema"?,
        "example"?, "validate"?}``: an optional JSON Schema (2020-12) and an example checked against it;
        ``validate`` makes the API refuse events of the type whose data does not match (400
        validation_failed naming the failing path). One Idempotency-Key, reused on every retry."""
        return self._do(_Request("POST", "/v1/event-types", body=dict(event_type), has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def list_event_types(self, *, archived: bool = False, limit: int | None = None,
                         cancel: threading.Event | None = None,
                         timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """GET /v1/event-types: the catalog by name, every page; archived entries too with ``archived=True``."""
        return self._list("/v1/event-types", {"archived": "true" if archived else None, "limit": limit},
                          cancel, timeout)

    def get_event_type(self, name: str, *, cancel: threading.Event | None = None,
                       timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/event-types/{name}, archived or not."""
        return self._do(_Request("GET", f"/v1/event-types/{_enc(name)}"), cancel, timeout)

    def update_event_type(self, name: str, patch: Mapping[str, Any], *, cancel: threading.Event | None = None,
                          timeout: float | None = None) -> dict[str, Any]:
        """PATCH /v1/event-types/{name}: changes the keys present (None clears description, schema or
        example; ``archived: False`` brings an archived entry back)."""
        return self._do(_Request("PATCH", f"/v1/event-types/{_enc(name)}", body=dict(patch), has_body=True),
                        cancel, timeout)

    def archive_event_type(self, name: str, *, cancel: threading.Event | None = None,
                           timeout: float | None = None) -> dict[str, Any]:
        """DELETE /v1/event-types/{name}: archives the entry (never deletes it: the name stays taken,
        events of the type are accepted unchecked) and returns it; archiving it again answers it again."""
        return self._do(_Request("DELETE", f"/v1/event-types/{_enc(name)}"), cancel, timeout)

    def create_portal_session(self, ttl: str | float | timedelta | None = None, *, idempotency_key: str | None = None,
                              cancel: threading.Event | None = None, timeout: float | None = None) -> dict[str, Any]:
        """POST /v1/portal-sessions: a one-time link ``{"url", "expires_at"}`` into the integrators' portal
        for the key's project, valid for ``ttl`` — a duration such as ``"15m"`` or ``"1h"``, seconds, or a
        timedelta (1 minute to 24 hours); None: the API's default, 15 minutes."""
        if isinstance(ttl, timedelta):
            secs = ttl.total_seconds()
            ttl = int(secs) if secs == int(secs) else secs
        body = {} if ttl is None or ttl == "" else {"ttl": ttl}
        return self._do(_Request("POST", "/v1/portal-sessions", body=body, has_body=True,
                                 idempotency_key=idempotency_key or ""), cancel, timeout)

    def get_openapi_document(self, *, cancel: threading.Event | None = None,
                             timeout: float | None = None) -> dict[str, Any]:
        """GET /v1/openapi.json."""
        return self._do(_Request("GET", "/v1/openapi.json"), cancel, timeout)

    # ---- machinery

    def _list(self, path: str, query: Mapping[str, Any], cancel: threading.Event | None,
              timeout: float | None) -> Iterator[dict[str, Any]]:
        q = {k: str(v) for k, v in query.items() if v is not None and v != ""}
        while True:
            page = self._do(_Request("GET", path, query=dict(q)), cancel, timeout)
            yield from page["data"]
            if not page.get("next_cursor"):
                return
            q["cursor"] = page["next_cursor"]

    def _do(self, r: _Request, cancel: threading.Event | None, timeout: float | None) -> Any:
        if r.idempotency_key == "":
            r.idempotency_key = str(uuid.uuid4())  # one key per logical operation, sent on every try
        deadline = time.monotonic() + timeout if timeout is not None else None
        last: WebhookdError | None = None

        def wait(seconds: float) -> None:
            if deadline is not None and time.monotonic() + seconds > deadline:
                raise WebhookdCancelledError(f"webhookd: {r.method} {r.path}: deadline passed", last)
            if cancel is not None:
                if cancel.wait(max(seconds, 0)):
                    raise WebhookdCancelledError(f"webhookd: {r.method} {r.path}: cancelled", last)
            elif seconds > 0:
                time.sleep(seconds)

        attempt = 0
        while True:
            attempt += 1
            self._pacer.wait(wait)
            status: int | None = None
            headers: dict[str, str] | None = None
            body = b""
            net_err: BaseException | None = None
            try:
                status, headers, body = self._send(r, deadline)
            except (OSError, http.client.HTTPException) as e:
                net_err = e
            self._pacer.done(status, headers)
            if status is not None and status < 300:
                if r.ndjson_out:
                    return [json.loads(line) for line in body.splitlines() if line.strip()]
                return json.loads(body) if body and status != 204 else None
            if status is not None and headers is not None:
                last = error_from_response(status, headers, body, attempt)
            if cancel is not None and cancel.is_set():
                raise WebhookdCancelledError(f"webhookd: {r.method} {r.path}: cancelled", last)
            if status is None:
                retry = r.safe or _is_connect_error(net_err)
                delay = backoff(self.retry, attempt)
            else:
                assert last is not None and headers is not None
                if r.delete_call and attempt > 1 and status == 404:
                    return None  # an earlier try deleted it and its answer was lost
                retry = last.temporary and (r.safe or status == 429)
                delay = backoff(self.retry, attempt)
                ra = parse_retry_after({k.lower(): v for k, v in headers.items()}.get("retry-after"))
                if ra is not None:
                    if ra > self.retry.max_retry_after:
                        retry = False
                    delay = after_retry_after(ra)
            if r.ndjson_stream is not None:
                retry = False  # its body is spent
            out_of_time = deadline is not None and time.monotonic() + delay > deadline
            if not retry or attempt >= self.retry.max_attempts or out_of_time:
                if last is not None and status is not None:
                    raise last
                raise WebhookdNetworkError(f"webhookd: {r.method} {r.path}: {attempt} tries: {net_err}", attempt, last)
            wait(delay)

    def _send(self, r: _Request, deadline: float | None) -> tuple[int, dict[str, str], bytes]:
        url = self.base_url + r.path
        if r.query:
            url += "?" + urllib.parse.urlencode(r.query)
        data: bytes | Iterable[bytes] | None = r.ndjson if r.ndjson is not None else \
            json.dumps(r.body).encode() if r.has_body else None
        if r.ndjson_stream is not None:
            data = r.ndjson_stream  # an iterable without a length: urllib sends it chunked
        req = urllib.request.Request(url, data=data, method=r.method)
        for k, v in r.headers.items():
            req.add_header(k, v)
        req.add_header("Authorization", f"Bearer {self._api_key}")
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", self._user_agent)
        if r.ndjson is not None or r.ndjson_stream is not None:
            req.add_header("Content-Type", "application/x-ndjson")
        elif data is not None:
            req.add_header("Content-Type", "application/json")
        if r.idempotency_key:
            req.add_header("Idempotency-Key", r.idempotency_key)
        per_try = self.retry.per_try_timeout
        if deadline is not None:
            per_try = max(min(per_try, deadline - time.monotonic()), 0.001)
        try:
            with self._opener.open(req, timeout=per_try) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, dict(e.headers.items()), e.read()


def _ndjson_chunks(events: Iterable[NewEvent | Mapping[str, Any]],
                   cancel: threading.Event | None) -> Iterator[bytes]:
    """The NDJSON lines of events in chunks of about 64 KiB: one event at a time is read, one chunk held."""
    buf = bytearray()
    for e in events:
        if cancel is not None and cancel.is_set():
            raise WebhookdCancelledError("webhookd: POST /v1/events/bulk: cancelled", None)
        buf += json.dumps(e.to_json() if isinstance(e, NewEvent) else e, separators=(",", ":")).encode() + b"\n"
        if len(buf) >= 64 << 10:
            yield bytes(buf)
            buf.clear()
    if buf:
        yield bytes(buf)


def _is_connect_error(e: BaseException | None) -> bool:
    reason = getattr(e, "reason", e)
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))
