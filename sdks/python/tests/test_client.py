import json
import threading
import time
import unittest
from collections.abc import Callable
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from webhookd import Client, RetryPolicy, WebhookdCancelledError, WebhookdError, backoff, parse_retry_after

FAST = RetryPolicy(base_delay=0.001, max_delay=0.005)


def api_error(code: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": "m", "request_id": "req_body", **extra}}


class Server:
    """A loopback server answering with a script; it records each request."""

    def __init__(self, answer: Callable[[int, str, str], tuple[int, Any, dict[str, str]]]) -> None:
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                outer.seen.append({"method": self.command, "path": self.path, "key": self.headers.get("Idempotency-Key"),
                                   "body": json.loads(body) if body else None})
                status, body, headers = answer(len(outer.seen), self.command, self.path)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = handle_one

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class ClientTest(unittest.TestCase):
    def serve(self, answer: Callable[[int, str, str], tuple[int, Any, dict[str, str]]]) -> Server:
        s = Server(answer)
        self.addCleanup(s.close)
        return s

    def test_backoff_and_retry_after(self) -> None:
        p = RetryPolicy(base_delay=0.1, max_delay=1.0)
        for n, ceiling in [(1, 0.1), (3, 0.4), (10, 1.0)]:
            for _ in range(50):
                self.assertLessEqual(backoff(p, n), ceiling)
        self.assertEqual(parse_retry_after("2"), 2.0)
        self.assertEqual(parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", now=4.0), 6.0)
        self.assertIsNone(parse_retry_after("soon"))
        self.assertIsNone(parse_retry_after(None))

    def test_503_retried_with_the_same_key_and_400_not_retried(self) -> None:
        def answer(n: int, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
            if path == "/v1/events" and n == 1:
                return 503, api_error("unavailable"), {"Retry-After": "0"}
            if path == "/v1/events":
                return 202, {"id": "evt_1", "deliveries": []}, {}
            return 400, api_error("validation_failed", field="events[0].type"), {}

        s = self.serve(answer)
        c = Client(s.url, "key", retry=FAST)
        self.assertEqual(c.send_event({"type": "a.b", "data": {"n": 1}})["id"], "evt_1")
        self.assertEqual(len(s.seen), 2)
        self.assertEqual(len(s.seen[0]["key"]), 36)
        self.assertEqual(s.seen[1]["key"], s.seen[0]["key"])
        with self.assertRaises(WebhookdError) as cm:
            c.send_events([{"type": "bad type", "data": 1}])
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field, e.request_id, e.attempts),
                         (400, "validation_failed", "events[0].type", "req_body", 1))
        self.assertEqual(len(s.seen), 3)

    def test_list_follows_next_cursor(self) -> None:
        def answer(n: int, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
            if "cursor" not in parse_qs(urlparse(path).query):
                return 200, {"data": [{"id": "ep_1"}, {"id": "ep_2"}], "next_cursor": "c2"}, {}
            return 200, {"data": [{"id": "ep_3"}], "next_cursor": None}, {}

        s = self.serve(answer)
        c = Client(s.url, "key", retry=FAST)
        self.assertEqual([e["id"] for e in c.list_endpoints(limit=2)], ["ep_1", "ep_2", "ep_3"])
        self.assertEqual(s.seen[1]["path"], "/v1/endpoints?limit=2&cursor=c2")

    def test_test_route_not_retried_after_500_and_delete_finding_it_gone_succeeds(self) -> None:
        def answer(n: int, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
            if method == "DELETE":
                return (503, api_error("unavailable"), {}) if n == 2 else (404, api_error("not_found"), {})
            return 500, api_error("internal"), {}

        s = self.serve(answer)
        c = Client(s.url, "key", retry=FAST)
        with self.assertRaises(WebhookdError) as cm:
            c.test_endpoint("ep_1")
        self.assertEqual((cm.exception.status, cm.exception.attempts), (500, 1))
        c.delete_endpoint("ep_1")
        self.assertEqual(len(s.seen), 3)

    def test_deadline_and_cancel(self) -> None:
        s = self.serve(lambda n, m, p: (429, api_error("rate_limited"), {"Retry-After": "20"}))
        c = Client(s.url, "key")
        start = time.monotonic()
        with self.assertRaises(WebhookdError) as cm:
            c.get_event("evt_1", timeout=3)
        self.assertEqual(cm.exception.status, 429)
        self.assertLess(time.monotonic() - start, 1)
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        start = time.monotonic()
        with self.assertRaises(WebhookdCancelledError) as cc:
            c.get_event("evt_1", cancel=cancel)
        self.assertLess(time.monotonic() - start, 1)
        assert cc.exception.last_error is not None
        self.assertEqual(cc.exception.last_error.status, 429)

    def test_event_type_catalog_and_portal_links(self) -> None:
        def et(name: str, **extra: Any) -> dict[str, Any]:
            return {"name": name, "description": "", "schema": None, "example": None, "validate": False,
                    "archived": False, "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
                    **extra}

        creates = 0

        def answer(n: int, method: str, path: str) -> tuple[int, Any, dict[str, str]]:
            nonlocal creates
            u = urlparse(path)
            if method == "POST" and u.path == "/v1/event-types":
                creates += 1
                if creates == 1:
                    return 503, api_error("unavailable"), {"Retry-After": "0"}
                return 201, et("invoice.paid"), {}
            if method == "GET" and u.path == "/v1/event-types":
                if "cursor" not in parse_qs(u.query):
                    return 200, {"data": [et("a.b")], "next_cursor": "c2"}, {}
                return 200, {"data": [et("c.d")], "next_cursor": None}, {}
            if u.path == "/v1/event-types/a%2Fb":
                return 404, api_error("not_found"), {}
            if method == "PATCH":
                return 200, et("invoice.paid", validate=True), {}
            if method == "DELETE":
                return 200, et("invoice.paid", archived=True), {}
            if u.path == "/v1/portal-sessions":
                return 201, {"url": "http://x/portal/open/wpl_1", "expires_at": "2026-01-01T01:00:00Z"}, {}
            return 599, api_error("no_rule"), {}

        s = self.serve(answer)
        c = Client(s.url, "key", retry=FAST)
        created = c.create_event_type({"name": "invoice.paid", "schema": {"type": "object"}, "validate": True})
        self.assertEqual(created["name"], "invoice.paid")
        self.assertEqual(len(s.seen), 2)
        self.assertEqual(len(s.seen[0]["key"]), 36)
        self.assertEqual(s.seen[1]["key"], s.seen[0]["key"])
        self.assertEqual(s.seen[1]["body"], {"name": "invoice.paid", "schema": {"type": "object"}, "validate": True})

        self.assertEqual([t["name"] for t in c.list_event_types(archived=True, limit=1)], ["a.b", "c.d"])
        self.assertEqual(s.seen[2]["path"], "/v1/event-types?archived=true&limit=1")
        self.assertEqual(s.seen[3]["path"], "/v1/event-types?archived=true&limit=1&cursor=c2")

        with self.assertRaises(WebhookdError) as cm:
            c.get_event_type("a/b")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))
        self.assertTrue(c.update_event_type("invoice.paid", {"validate": True, "example": None})["validate"])
        self.assertEqual((s.seen[5]["method"], s.seen[5]["path"], s.seen[5]["body"]),
                         ("PATCH", "/v1/event-types/invoice.paid", {"validate": True, "example": None}))
        self.assertTrue(c.archive_event_type("invoice.paid")["archived"])
        self.assertEqual((s.seen[6]["method"], s.seen[6]["key"]), ("DELETE", None))

        link = c.create_portal_session("1h", idempotency_key="k-portal")
        self.assertIn("/portal/open/wpl_", link["url"])
        self.assertEqual((s.seen[7]["key"], s.seen[7]["body"]), ("k-portal", {"ttl": "1h"}))
        c.create_portal_session(timedelta(minutes=30))
        self.assertEqual(s.seen[8]["body"], {"ttl": 1800})
        c.create_portal_session()
        self.assertEqual(s.seen[9]["body"], {})
        self.assertEqual(len(s.seen[9]["key"]), 36)


if __name__ == "__main__":
    unittest.main()


class ChunkedServer:
    """A loopback server reading chunked bodies chunk by chunk: it records each request's headers and body and
    sets first_chunk once bytes of a body arrived; answer(n) gives the n-th request's status and body."""

    def __init__(self, answer: Callable[[int, str], tuple[int, Any]]) -> None:
        self.seen: list[dict[str, Any]] = []
        self.first_chunk = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                body = b""
                if self.headers.get("Transfer-Encoding") == "chunked":
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            break
                        body += self.rfile.read(size)
                        self.rfile.readline()
                        outer.first_chunk.set()
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
                status, out = answer(len(outer.seen), self.path)
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = handle_one

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class BulkStreamTest(unittest.TestCase):
    def test_stream_events_bulk_sends_a_generator_chunked_while_it_is_read_and_makes_one_try(self) -> None:
        s = ChunkedServer(lambda n, _p: (503, api_error("unavailable")) if n == 2 else (202, {"job_id": "job_1"}))
        self.addCleanup(s.close)
        c = Client(s.url, "key", retry=FAST)
        n = 3000
        streamed: list[bool] = []

        def events() -> Any:
            for i in range(1, n + 1):
                if i == n // 2:
                    # Half-way, the API must have bytes already: a client that read every event before sending
                    # would wait here in vain.
                    streamed.append(s.first_chunk.wait(10))
                yield {"type": "bulk.item", "data": {"n": i, "pad": "x" * 40}}

        self.assertEqual(c.stream_events_bulk(events(), idempotency_key="k1"), "job_1")
        self.assertEqual(streamed, [True])
        h = s.seen[0]["headers"]
        self.assertEqual(h.get("Transfer-Encoding"), "chunked")
        self.assertIsNone(h.get("Content-Length"))
        self.assertEqual(h.get("Content-Type"), "application/x-ndjson")
        self.assertEqual(h.get("Idempotency-Key"), "k1")
        lines = s.seen[0]["body"].split(b"\n")
        self.assertEqual(len(lines), n + 1)
        self.assertEqual(json.loads(lines[776]), {"type": "bulk.item", "data": {"n": 777, "pad": "x" * 40}})
        # A list streams too; its 503 is not retried (the body is spent).
        with self.assertRaises(WebhookdError) as cm:
            c.stream_events_bulk([{"type": "a", "data": 1}])
        self.assertEqual((cm.exception.status, cm.exception.attempts), (503, 1))
        self.assertEqual(len(s.seen), 2)

    def test_wait_job_backs_off_until_finished_and_reports_each_change(self) -> None:
        readings = [("queued", 0, 0), ("running", 1, 0), ("running", 1, 0), ("running", 1, 0), ("succeeded", 2, 1)]

        def answer(n: int, path: str) -> tuple[int, Any]:
            st, done, failed = readings[min(n, len(readings)) - 1]
            return 200, {"id": path.rsplit("/", 1)[1], "kind": "event_bulk", "status": st, "total": 3, "done": done,
                         "failed_count": failed}

        s = ChunkedServer(answer)
        self.addCleanup(s.close)
        c = Client(s.url, "key", retry=FAST)
        progress: list[str] = []
        j = c.wait_job("job_1", interval=0.005,
                       on_progress=lambda p: progress.append(f"{p['status']} {p['done']}/{p['total']} {p['failed_count']}"))
        self.assertEqual(j["status"], "succeeded")
        self.assertEqual(progress, ["queued 0/3 0", "running 1/3 0", "succeeded 2/3 1"])
        self.assertEqual(len(s.seen), 5)
        readings[:] = [("running", 0, 0)]
        with self.assertRaises(WebhookdCancelledError):
            c.wait_job("job_2", interval=0.005, timeout=0.1)
