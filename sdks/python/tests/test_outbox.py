import pathlib
import re
import unittest

from webhookd import OUTBOX_INSERT, outbox, outbox_insert


class Cursor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def execute(self, sql: str, params: tuple) -> None:
        self.calls.append((sql, params))


class OutboxTest(unittest.TestCase):
    def test_row_with_every_column(self) -> None:
        c = Cursor()
        outbox(c, "order.created", {"id": 1}, external_id="o-1", endpoint_ids=["ep_1", 'ep "2"'])
        self.assertEqual(c.calls, [(OUTBOX_INSERT, ("order.created", '{"id":1}', "o-1", '{"ep_1","ep \\"2\\""}'))])

    def test_optional_columns_are_null(self) -> None:
        self.assertEqual(outbox_insert("a", [1, 2])[1], ("a", "[1,2]", None, None))

    def test_type_is_required(self) -> None:
        with self.assertRaises(ValueError):
            outbox_insert("", {})

    def test_same_statement_as_the_go_client(self) -> None:
        go = (pathlib.Path(__file__).parents[3] / "client" / "outbox.go").read_text()
        stmt = re.search(r"const OutboxInsert = `([^`]*)`", go).group(1)
        self.assertEqual(re.sub(r"\$\d", "%s", stmt), OUTBOX_INSERT)


if __name__ == "__main__":
    unittest.main()
