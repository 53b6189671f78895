"""A model of what observing and acting by share keep in etcd, for the properties of
tests/unit/test_borrowing.py and tests/unit/test_whole_decision.py: a revision every
write moves, the writer lock's tenures, the owner keys, the written observations and each
owner's last whole round."""

from __future__ import annotations

from dataclasses import dataclass, field

from minidock.core.borrowing import Written
from minidock.core.handover import OwnerKey


@dataclass
class EtcdModel:
    revision: int = 0
    tenure: int = 0
    owners: dict[str, OwnerKey] = field(default_factory=dict)
    written: dict[str, Written] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)

    def write(self) -> int:
        self.revision += 1
        return self.revision

    def lock(self) -> tuple[int, int]:
        """A tenure begins (the lock key, then PREFIX/tenure rewritten): it, the one before."""
        before = self.tenure
        self.write()
        self.tenure = self.write()
        return self.tenure, before

    def hand(self, host: str, to: str | None) -> None:
        """The host's owner key acknowledged, then (to a member) created afresh."""
        if host in self.owners:
            del self.owners[host]
            self.write()
        if to is not None:
            self.owners[host] = OwnerKey(to, self.write())
