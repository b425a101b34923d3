import json
import pathlib
import unittest

from webhookd import ROUTES, Client


class RoutesTest(unittest.TestCase):
    def test_every_route_of_the_openapi_document_has_a_method(self) -> None:
        doc = json.loads((pathlib.Path(__file__).parents[3] / "api" / "openapi.json").read_text())
        n = 0
        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                if method not in ("get", "post", "put", "patch", "delete") or op.get("x-sdk") is False:
                    continue  # x-sdk false: a route for webhookd's own CLI (the relay stream of `webhookd listen`)
                n += 1
                route = ROUTES.get(op["operationId"])
                self.assertIsNotNone(route, f"{method.upper()} {path} ({op['operationId']}) has no method in the Python SDK")
                assert route is not None
                self.assertEqual((route[0], route[1]), (method.upper(), path), op["operationId"])
                self.assertTrue(callable(getattr(Client, route[2], None)), f"Client.{route[2]} is missing")
        self.assertEqual(len(ROUTES), n, "ROUTES names an operation the document does not have")


if __name__ == "__main__":
    unittest.main()
