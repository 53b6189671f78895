"""When a pass orders an ACME certificate (minidock.core.tls): due names, renewal under the
window, another directory, and back-off after failures that never hammers the CA."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from minidock.core.tls import BACKOFF_FIRST, BACKOFF_MAX, TlsState, due, failed, issued, renews_at

DAY = 86400.0
DIRECTORY = "https://acme.test/dir"


def with_certificate(name: str, not_after: float, directory: str = DIRECTORY) -> TlsState:
    return issued(
        TlsState(),
        name,
        "CHAIN",
        "KEY",
        issuer="CA",
        not_after=not_after,
        directory=directory,
        now=0,
    )


def test_a_name_without_a_certificate_is_due_and_one_far_from_its_end_is_not() -> None:
    tls = with_certificate("a.test", not_after=90 * DAY)
    assert due(["b.test", "a.test", "b.test"], tls, DIRECTORY, 0, 30 * DAY) == ("b.test",)
    assert renews_at(tls.record("a.test"), 30 * DAY) == 60 * DAY


def test_a_certificate_under_the_window_or_from_another_directory_is_renewed() -> None:
    tls = with_certificate("a.test", not_after=90 * DAY)
    assert due(["a.test"], tls, DIRECTORY, 60 * DAY - 1, 30 * DAY) == ()
    assert due(["a.test"], tls, DIRECTORY, 60 * DAY, 30 * DAY) == ("a.test",)
    assert due(["a.test"], tls, "https://other.test/dir", 0, 30 * DAY) == ("a.test",)


def test_a_failed_order_backs_off_and_keeps_the_certificate_it_has() -> None:
    tls = with_certificate("a.test", not_after=10 * DAY)
    tls = failed(tls, "a.test", "the CA refused", now=0)
    record = tls.record("a.test")
    assert (record.failures, record.next_try, record.error) == (1, BACKOFF_FIRST, "the CA refused")
    assert record.has_certificate  # still served
    assert due(["a.test"], tls, DIRECTORY, BACKOFF_FIRST - 1, 30 * DAY) == ()
    assert due(["a.test"], tls, DIRECTORY, BACKOFF_FIRST, 30 * DAY) == ("a.test",)
    later = failed(tls, "a.test", "again", now=BACKOFF_FIRST, retry_after=10 * DAY)
    assert later.record("a.test").next_try == 10 * DAY  # the CA's Retry-After wins when later
    cleared = issued(
        later, "a.test", "C2", "K2", issuer="CA", not_after=99 * DAY, directory=DIRECTORY, now=5
    )
    assert (cleared.record("a.test").failures, cleared.record("a.test").error) == (0, "")


@given(st.integers(min_value=1, max_value=40))
def test_the_back_off_doubles_up_to_a_day(failures: int) -> None:
    tls, now = TlsState(), 0.0
    waits = []
    for _ in range(failures):
        tls = failed(tls, "a.test", "down", now)
        waits.append(tls.record("a.test").next_try - now)
        now = tls.record("a.test").next_try
    assert waits[0] == BACKOFF_FIRST
    assert all(b == min(2 * a, BACKOFF_MAX) for a, b in itertools.pairwise(waits))
    assert max(waits) <= BACKOFF_MAX
