"""The bound on borrowed observations a deciding tenure hands down (docs/scale.md,
"Observing by share"; the rule is minidock.core.borrowing's `Handed`). `PREFIX/handed`
holds `{"tenure": <revision>, "since": <revision>, "acted_on": {<host>: <revision>},
"acted": <bool>, "hosts": [<host>] | null}`, put by the `watch` that makes the state's
passes with the last commit of each pass (EtcdWriter.ride: no revision of its own, and
only while it holds the lock); the key's mod revision is the bound of what the pass
acted on. Read by the `watch` that takes the lock next, when the tenure before its own
is not its own.

Loaded only for an etcd state, as minidock.store.etcd is.
"""

from __future__ import annotations

import json

from minidock.core.borrowing import Handed
from minidock.store.etcd import EtcdStore

__all__ = ["hand_down", "read_handed"]


def hand_down(store: EtcdStore, handed: Handed) -> None:
    """Put `handed` with the next commit of `store` (its lock holder's)."""
    if store.writer is None:
        return
    record = {
        "tenure": handed.tenure,
        "since": handed.since,
        "acted_on": dict(sorted(handed.acted_on.items())),
        "acted": handed.acted,
        "hosts": None if handed.hosts is None else sorted(handed.hosts),
    }
    value = json.dumps(record, separators=(",", ":")).encode()
    store.writer.ride(store.keys.handed, value)


def read_handed(store: EtcdStore) -> tuple[Handed | None, int]:
    """The bound handed down last and the revision it was written at (None, 0: none, or
    one this MiniDock does not read: the next tenure's own bound stands instead)."""
    found = store.kvs(store.keys.handed)
    if not found:
        return None, 0
    try:
        record = json.loads(found[0].value)
        hosts = record["hosts"]
        handed = Handed(
            tenure=int(record["tenure"]),
            since=int(record["since"]),
            acted_on={str(h): int(r) for h, r in record["acted_on"].items()},
            acted=bool(record["acted"]),
            hosts=None if hosts is None else frozenset(str(h) for h in hosts),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, 0
    return handed, int(found[0].mod_revision)
