import json
import pathlib
import unittest

from webhookd import WebhookVerificationError, sign, verify

FIXTURE = json.loads((pathlib.Path(__file__).parents[2] / "conformance" / "signatures.json").read_text())
OTHER = "whsec_YW5vdGhlciBrZXkgb2YgMjQgYnl0ZXMh"


class VerifyTest(unittest.TestCase):
    def test_requests_webhookd_sent_verify_with_each_secret(self) -> None:
        self.assertGreaterEqual(len(FIXTURE["deliveries"]), 2)
        for d in FIXTURE["deliveries"]:
            h, now = d["headers"], int(d["headers"]["webhook-timestamp"])
            for secret in d["secrets"]:
                self.assertEqual(verify(d["body"], h, secret, now=now)["id"], h["webhook-id"], d["name"])
            verify(d["body"].encode(), h, d["secrets"], now=now)
            entries = h["webhook-signature"].split(" ")
            for i, secret in enumerate(d["secrets"]):
                self.assertEqual(sign(secret, h["webhook-id"], now, d["body"]), entries[i])

    def test_tampering_other_secret_and_far_clock_are_refused(self) -> None:
        for d in FIXTURE["deliveries"]:
            h, now, s = d["headers"], int(d["headers"]["webhook-timestamp"]), d["secrets"][0]
            cases = {
                "changed body": lambda: verify(d["body"].replace("invoice", "invoicf"), h, s, now=now),
                "another secret": lambda: verify(d["body"], h, OTHER, now=now),
                "5 minutes later": lambda: verify(d["body"], h, s, now=now + 301),
                "5 minutes earlier": lambda: verify(d["body"], h, s, now=now - 301),
                "no signature": lambda: verify(d["body"], {**h, "webhook-signature": ""}, s, now=now),
                "another id": lambda: verify(d["body"], {**h, "webhook-id": "evt_x"}, s, now=now),
            }
            for what, call in cases.items():
                with self.subTest(d["name"] + ": " + what), self.assertRaises(WebhookVerificationError):
                    call()
            verify(d["body"], h, s, now=now + 299)

    def test_header_names_are_case_insensitive(self) -> None:
        d = FIXTURE["deliveries"][0]
        h = {k.title(): v for k, v in d["headers"].items()}
        verify(d["body"], h, d["secrets"][0], now=int(d["headers"]["webhook-timestamp"]))


if __name__ == "__main__":
    unittest.main()
