"""What the controller keeps about its own reconcile passes, for `minidock metrics`: counts,
durations (as a histogram's buckets), results by exit code and acts by kind, summed over
every pass since the store was made. Pure values; the use cases add each pass.

MiniDock runs no daemon whose memory could hold Prometheus counters, so the counters live
in the controller state and only ever grow (docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = ["PASS_BUCKETS", "PassStats"]

# upper bounds (seconds) of the pass-duration histogram's buckets; +Inf is `count`
PASS_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass(frozen=True)
class PassStats:
    """Every pass so far: `buckets[i]` counts those that took at most `bounds[i]` seconds
    (cumulative, as Prometheus wants them); `codes` counts passes by exit code and `acts`
    the acts they made by kind (run, stop, adopt, push, act-failed); `last_*` describe the
    newest pass (`last_at` 0: none yet)."""

    count: int = 0
    seconds: float = 0.0
    bounds: tuple[float, ...] = PASS_BUCKETS
    buckets: tuple[int, ...] = (0,) * len(PASS_BUCKETS)
    codes: dict[str, int] = field(default_factory=dict)
    acts: dict[str, int] = field(default_factory=dict)
    last_at: float = 0.0
    last_seconds: float = 0.0
    last_code: int = 0

    def after(self, seconds: float, code: int, acts: Mapping[str, int], at: float) -> PassStats:
        """These stats with one more pass: it took `seconds`, exited `code`, made `acts`
        and ended at `at` (epoch seconds)."""
        buckets = self.buckets if len(self.buckets) == len(self.bounds) else (0,) * len(self.bounds)
        codes = dict(self.codes)
        codes[str(code)] = codes.get(str(code), 0) + 1
        made = dict(self.acts)
        for kind, n in acts.items():
            made[kind] = made.get(kind, 0) + n
        return replace(
            self,
            count=self.count + 1,
            seconds=self.seconds + seconds,
            buckets=tuple(n + (seconds <= b) for n, b in zip(buckets, self.bounds, strict=True)),
            codes=codes,
            acts=made,
            last_at=at,
            last_seconds=seconds,
            last_code=code,
        )
