"""The outbox: make an event part of your own PostgreSQL transaction.

The row goes into ``webhookd_outbox`` (made once by ``webhookd outbox init
--database-url URL``) in the transaction that makes your business change, so
the event exists exactly when that transaction commits; webhookd's workers
(``WEBHOOKD_OUTBOX_SOURCES``) move it out. See the main README, "Outbox".
"""

from __future__ import annotations

import json
from typing import Any, Sequence

#: The INSERT, with ``%s`` placeholders (psycopg, psycopg2, pg8000): type,
#: data (JSON text), external_id or None, endpoint_ids as a PostgreSQL array
#: literal or None. Every argument is text, so any driver takes it.
OUTBOX_INSERT = ("INSERT INTO webhookd_outbox (type, data, external_id, endpoint_ids) "
                 "VALUES (%s, %s::jsonb, %s, %s::text[])")


def outbox_insert(type: str, data: Any, *, external_id: str | None = None,
                  endpoint_ids: Sequence[str] | None = None) -> tuple[str, tuple[Any, ...]]:
    """The statement and parameters that insert one outbox row, for
    ``cursor.execute(*outbox_insert(...))``. ``data`` is any JSON value."""
    if not type:
        raise ValueError("outbox: type is required")
    ids = None
    if endpoint_ids is not None:
        ids = "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in endpoint_ids) + "}"
    return OUTBOX_INSERT, (type, json.dumps(data, separators=(",", ":")), external_id, ids)


def outbox(cursor: Any, type: str, data: Any, *, external_id: str | None = None,
           endpoint_ids: Sequence[str] | None = None) -> None:
    """Insert one outbox row with ``cursor`` (a DB-API cursor of your open
    transaction): it is an event once that transaction commits, and nothing
    if it rolls back."""
    cursor.execute(*outbox_insert(type, data, external_id=external_id, endpoint_ids=endpoint_ids))
