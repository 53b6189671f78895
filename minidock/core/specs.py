"""The spec each task runs, so that a task is judged by what it runs. Pure.

During a rollout a service's old tasks run the previous spec: whether they take traffic
(a health check or not), which container port a route reaches, which ports they expose
and whether they carry the service's network alias are all questions of *their* spec, not
of the one being rolled out (issue 31). A task's `minidock.spec` label names its spec by
hash; the state keeps each service's current and previous spec, and the older specs that
tasks were still seen running (`ServiceState.older`: several applies within one rollout).
A task of a spec the state no longer keeps is judged by the service's effective spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from minidock.core.state import ControllerState
from minidock.model import Cluster, Container, Service

__all__ = ["TaskSpecs"]


@dataclass(frozen=True)
class TaskSpecs:
    """The kept specs by (service, spec hash), and each service's effective spec (after any
    rollback; pruned services' last spec included: their tasks still drain)."""

    kept: Mapping[tuple[str, str], Service]
    effective: Mapping[str, Service]

    @staticmethod
    def of_state(cluster: Cluster, state: ControllerState) -> TaskSpecs:
        kept: dict[tuple[str, str], Service] = {}
        effective: dict[str, Service] = {s.name: s for s in cluster.services}
        for name, ss in state.services.items():
            effective[name] = ss.spec
            for spec in (*ss.older, ss.previous, ss.spec):
                if spec is not None:
                    kept[(name, spec.spec_hash())] = spec
        for s in cluster.services:
            kept.setdefault((s.name, s.spec_hash()), s)
        return TaskSpecs(kept, effective)

    def of(self, c: Container) -> Service | None:
        """The spec `c` runs: its own where kept, else its service's effective one."""
        found = self.kept.get((c.service, c.spec))
        return found if found is not None else self.effective.get(c.service)

    def current(self, service: str) -> Service | None:
        return self.effective.get(service)
