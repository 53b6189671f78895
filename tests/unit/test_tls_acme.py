"""When a pass orders an ACME certificate (minidock.core.tls): due names, renewal under the
window, another directory, and back-off after failures that never hammers the CA."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from minidock.core.tls import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    ORDER_TIMEOUT,
    AcmeAccount,
    PendingOrder,
    TlsState,
    answered,
    answering,
    challenges,
    due,
    failed,
    issued,
    ordered,
    overdue,
    pending,
    renews_at,
)

DAY = 86400.0
DIRECTORY = "https://acme.test/dir"
ACCOUNT = AcmeAccount(DIRECTORY, "JWK", "https://acme.test/acct/1")


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


# -- renewal by lifetime, and orders that never wait in a pass ------------------------------
HOUR = 3600.0


def issued_now(tls: TlsState, name: str, now: float, lifetime: float = DAY) -> TlsState:
    """The CA's certificate for `name`: valid from a minute ago (CAs backdate) for
    `lifetime`, as step-ca's and Let's Encrypt's short profiles issue."""
    start = now - 60
    return issued(
        tls, name, f"CHAIN@{now}", "KEY", issuer="CA", not_after=start + lifetime,
        directory=DIRECTORY, now=now, not_before=start,
    )  # fmt: skip


def test_a_certificate_renews_when_a_third_of_its_lifetime_remains() -> None:
    tls = issued_now(TlsState(), "a.test", 0.0)  # 24 hours: renewed 8 hours before its end
    record = tls.record("a.test")
    assert renews_at(record) == record.not_after - 8 * HOUR
    ninety = issued_now(TlsState(), "a.test", 0.0, 90 * DAY).record("a.test")
    assert renews_at(ninety) == ninety.not_after - 30 * DAY  # Let's Encrypt's: 30 days
    assert renews_at(record, 720 * HOUR) == record.not_after - 720 * HOUR  # set: as set
    old = with_certificate("a.test", not_after=90 * DAY)  # kept before not_before was
    assert renews_at(old.record("a.test")) == 90 * DAY - 30 * DAY


def test_24_hour_certificates_are_ordered_once_per_renewal_window_across_simulated_days() -> None:
    """A pass every minute for five days, its clock passed in; an order is started by one
    pass, answered by the next (its responses loaded) and collected by the one after (the
    CA issues at once). With the lifetime rule: one order per window. With
    `renew_before = 720h` on 24-hour certificates (the old default's trap), every pass
    would order one."""

    def run(renew_before: float | None) -> list[float]:
        tls, starts, now = TlsState(), [], 0.0
        while now < 5 * DAY:
            answer = answering(["a.test"], tls)  # the decision first, as decide makes it
            collect = pending(["a.test"], tls)
            start = due(["a.test"], tls, DIRECTORY, now, renew_before)
            for name in answer:  # then the acts: the CA told, once the pass's load is done
                tls = answered(tls, name)
            for name in collect:  # collected (the CA issued at once)
                tls = issued_now(tls, name, now)
            for name in start:
                starts.append(now)
                tls = ordered(tls, name, PendingOrder("u", "k", started=now), ACCOUNT)
            now += 60
        return starts

    starts = run(None)
    windows = [s // (16 * HOUR) for s in starts[1:]]
    order = 120  # from the order's start to its certificate: two passes
    assert len(starts) == 1 + int((5 * DAY - order - 60) // (16 * HOUR + order - 60))
    assert len(set(windows)) == len(windows)  # never two in one window
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(16 * HOUR <= g <= 16 * HOUR + 180 for g in gaps)  # at its window's start
    assert len(run(720 * HOUR)) == 5 * DAY // 180  # every third pass: order, answer, collect


def test_a_failing_ca_backs_off_within_the_window_and_the_old_certificate_serves() -> None:
    tls = issued_now(TlsState(), "a.test", 0.0)
    serving = tls.record("a.test").chain
    tries, now = [], renews_at(tls.record("a.test"))
    while now < tls.record("a.test").not_after:
        if due(["a.test"], tls, DIRECTORY, now):
            tries.append(now)
            tls = failed(tls, "a.test", "the CA does not answer", now)
        assert tls.record("a.test").chain == serving  # kept, and served
        now += 60
    waits = [b - a for a, b in itertools.pairwise(tries)]
    assert waits[:3] == [BACKOFF_FIRST, 2 * BACKOFF_FIRST, 4 * BACKOFF_FIRST]
    assert max(waits) <= DAY / 10 + 60  # capped at a tenth of its lifetime: tried again
    assert len(tries) >= 6  # several tries before it ends, not one a day


def test_a_pending_order_is_answered_collected_keeps_its_responses_served_and_times_out() -> None:
    order = PendingOrder("u", "k", "csr", (("/.well-known/acme-challenge/t", "t.k"),), 100.0)
    started = ordered(TlsState(), "a.test", order, ACCOUNT)
    assert due(["a.test"], started, DIRECTORY, 200.0) == ()  # not ordered twice
    assert (answering(["a.test", "b.test"], started), pending(["a.test"], started)) == (
        ("a.test",),
        (),
    )  # the next pass loads its responses and tells the CA; none collects it yet
    tls = answered(started, "a.test")
    assert (answering(["a.test"], tls), pending(["a.test", "b.test"], tls)) == ((), ("a.test",))
    assert answered(TlsState(), "a.test") == TlsState()  # no order: nothing to tell
    assert challenges(started) == challenges(tls) == {"/.well-known/acme-challenge/t": "t.k"}
    assert overdue(tls, 100.0 + ORDER_TIMEOUT - 1) == ()
    assert overdue(tls, 100.0 + ORDER_TIMEOUT) == ("a.test",)
    gone = failed(tls, "a.test", "late", 100.0 + ORDER_TIMEOUT)
    assert (gone.record("a.test").order, challenges(gone)) == (None, {})
    done = issued_now(tls, "a.test", 300.0)
    assert (done.record("a.test").order, challenges(done)) == (None, {})


def test_the_decision_answers_then_collects_orders_and_fails_late_ones() -> None:
    from dataclasses import replace

    from minidock.core import ControllerState, admit
    from minidock.core.decide import decide
    from minidock.core.plan import WaitKind
    from minidock.model import AcmeSettings, Ingress, Route, RouteTls
    from tests.unit.test_ingress_core import CLUSTER, INVENTORY, WEB, observed, task

    web = replace(WEB, ingress=(Route("app.test", "/", 8080, RouteTls("acme")),))
    ingress = Ingress(hosts=("host1",), acme=AcmeSettings(directory=DIRECTORY))
    cluster = replace(CLUSTER, services=(web,), ingress=ingress)
    state = admit(ControllerState(), cluster, 1)
    seen = observed(task(1))
    proxy = replace(seen.proxies["host1"], spec=ingress.proxy_spec())
    seen = replace(seen, proxies={"host1": proxy})
    first = decide(cluster, INVENTORY, seen, state, 1000.0)
    assert (first.certificates, first.answer, first.challenges) == (("app.test",), (), ())
    assert not first.converged  # `apply --wait` waits for the next pass's load
    order = PendingOrder("u", "k", "csr", (("/.well-known/acme-challenge/t", "t.k"),), 1000.0)
    state = replace(state, tls=ordered(state.tls, "app.test", order, ACCOUNT))
    plan = decide(cluster, INVENTORY, seen, state, 1010.0)
    assert (plan.certificates, plan.answer, plan.collect) == ((), ("app.test",), ())
    assert plan.challenges == (("/.well-known/acme-challenge/t", "t.k"),)  # in this load
    state = replace(state, tls=answered(state.tls, "app.test"))
    plan = decide(cluster, INVENTORY, seen, state, 1020.0)
    assert (plan.certificates, plan.answer, plan.collect) == ((), (), ("app.test",))
    assert plan.challenges == (("/.well-known/acme-challenge/t", "t.k"),)  # still served
    assert [w.kind for w in plan.waiting if w.subject == "certificate app.test"] == [
        WaitKind.CERTIFICATE
    ]
    late = decide(cluster, INVENTORY, seen, state, 1000.0 + ORDER_TIMEOUT)
    assert (late.collect, late.challenges) == ((), ())
    assert late.state.tls.record("app.test").failures == 1
    assert [e.kind for e in late.events if e.kind.startswith("certificate")] == [
        "certificate-failed"
    ]
