"""Runs sdks/conformance/cases.json against cmd/webhookd-conformance (make
test-sdks starts it and sets WEBHOOKD_CONFORMANCE_URL): a real API behind a
fault proxy. The checks are the server's (internal/conformance); this runner
only makes each case's calls with one client and reports them."""

import json
import os
import pathlib
import threading
import time
import unittest
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from webhookd import Client, RetryPolicy, WebhookdCancelledError, WebhookdError

CONTROL = os.environ.get("WEBHOOKD_CONFORMANCE_URL")
CASES = json.loads((pathlib.Path(__file__).parents[2] / "conformance" / "cases.json").read_text())["cases"]


def post(path: str, body: Any) -> Any:
    req = urllib.request.Request(f"{CONTROL}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def run_call(c: Client, call: dict[str, Any]) -> dict[str, Any]:
    cancel = threading.Event()
    timer = threading.Timer(call["cancel_after_ms"] / 1000, cancel.set) if call.get("cancel_after_ms") else None
    if timer:
        timer.start()
    try:
        if call["op"] == "send_event":
            ev = c.send_event({k: call[k] for k in ("type", "data", "external_id") if k in call},
                              idempotency_key=call.get("idempotency_key"), cancel=cancel)
        elif call["op"] == "get_event":
            ev = c.get_event(call["id"], cancel=cancel)
        elif call["op"] == "send_bulk":
            return run_bulk(c, call, cancel)
        else:
            raise ValueError(call["op"])
        return {"ok": True, "id": ev["id"]}
    except (WebhookdError, WebhookdCancelledError) as e:
        cancelled = isinstance(e, WebhookdCancelledError)
        api = e.last_error if isinstance(e, WebhookdCancelledError) else e
        return {"ok": False, "error": {"cancelled": cancelled, "message": str(e), "status": api.status if api else 0,
                                       "code": api.code if api else "", "field": (api.field or "") if api else "",
                                       "request_id": (api.request_id or "") if api else "",
                                       "attempts": api.attempts if api else 0}}
    finally:
        if timer:
            timer.cancel()


def run_bulk(c: Client, call: dict[str, Any], cancel: threading.Event) -> dict[str, Any]:
    """Streams a send_bulk call's events from a generator as one job, waits for it with a progress callback and
    lists its refused lines."""
    job_id = c.stream_events_bulk((e for e in call["events"]), cancel=cancel)
    progress: list[dict[str, Any]] = []
    j = c.wait_job(job_id, interval=0.02, timeout=30, cancel=cancel, on_progress=lambda p: progress.append(
        {k: p[k] for k in ("status", "total", "done", "failed_count")}))
    errors = [{"line": e["line"], "code": e["code"], "field": e.get("field") or ""} for e in c.list_job_errors(job_id)]
    return {"ok": True, "id": job_id, "job": {**{k: j[k] for k in ("status", "total", "done", "failed_count")},
                                             "progress": progress, "errors": errors}}


@unittest.skipUnless(CONTROL, "WEBHOOKD_CONFORMANCE_URL is not set (make test-sdks sets it)")
class ConformanceTest(unittest.TestCase):
    def test_cases(self) -> None:
        for case in CASES:
            with self.subTest(case["name"]):
                sess = post("/sessions", {"case": case["name"]})
                r = case.get("retry", {})
                policy = RetryPolicy(max_attempts=r.get("max_attempts", 5), base_delay=r.get("base_delay_ms", 250) / 1000,
                                     max_delay=r.get("max_delay_ms", 30000) / 1000)
                c = Client(sess["api_url"], sess["api_key"], retry=policy)
                start = time.monotonic()
                results: list[Any] = []
                for call in case["calls"]:
                    n = call.get("repeat", 1)
                    with ThreadPoolExecutor(max_workers=call.get("concurrency", 1)) as pool:
                        results.extend(pool.map(lambda _: run_call(c, call), range(n)))
                verdict = post(f"/sessions/{sess['id']}/outcome",
                               {"results": results, "elapsed_ms": int((time.monotonic() - start) * 1000)})
                self.assertEqual(verdict["problems"], [], case["name"])


if __name__ == "__main__":
    unittest.main()
