"""Each reconcile pass added to the controller state's pass statistics (`PassStats`), so
that `minidock metrics` and `serve` can report passes that ran in other processes (cron,
`watch`): one more commit of the state the pass committed, under the pass's lock."""

from __future__ import annotations

from dataclasses import replace

from minidock.runner import PassResult
from minidock.store import Store
from minidock.usecases.outcomes import ExitCode


def record_pass(
    store: Store, result: PassResult, code: ExitCode, seconds: float, at: float
) -> None:
    """Commit the state the pass ended with, its statistics counting this pass: it took
    `seconds`, exited `code` and ended at `at`."""
    state = result.plan.state
    passes = state.passes.after(seconds, int(code), result.acts, at)
    store.commit(replace(state, passes=passes))
