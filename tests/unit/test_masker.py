"""One masker (issue 19.4): built from every generation still in use, applied before any
line is cut; plans and spec diffs never show a registry password; plain env values are
configuration and stay readable (27.7)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from minidock.core import ControllerState, Plan
from minidock.core.simulate import spec_diff
from minidock.core.slots import SlotState
from minidock.core.state import ServiceState
from minidock.masking import LINE_MAX, Masker, kept_masker, masker_for
from minidock.model import Cluster, Container, HostObservation, Observed, RegistryAuth
from minidock.store.sqlite import SQLiteStore
from tests.sim import svc


def generation(n: int) -> Cluster:
    web = svc("web", image=f"web:{n}", secrets=(("DB_PASSWORD", f"gen{n}-secret-value"),))
    return Cluster("c", "c.toml", "inv.toml", (web,))


def test_a_task_still_on_an_older_generation_has_its_secret_masked(tmp_path: Path) -> None:
    """Current gen 3, previous gen 2, a task still running gen 1: its secret is masked
    (before, only the current and previous specs were: gen 1's secret showed in `logs`)."""
    with SQLiteStore.open(tmp_path / "state") as store:
        for n in (1, 2, 3):
            store.commit(ControllerState(generation=n), generation=generation(n))
        gen1, gen2, gen3 = (generation(n).services[0] for n in (1, 2, 3))
        state = ControllerState(
            generation=3, services={"web": ServiceState(spec=gen3, previous=gen2, generation=3)}
        )
        old_task = Container(
            "id1", "web.1.t1", "h1", "c", "web", 1, "t1", gen1.spec_hash(), "web:1", "running"
        )
        observed = Observed({"h1": HostObservation("h1", True, (old_task,))})
        line = "connecting with gen1-secret-value, gen2-secret-value, gen3-secret-value"
        assert "gen1-secret-value" in kept_masker(state)(line)  # what logs used to do
        assert masker_for(store, state, observed)(line) == "connecting with ***, ***, ***"
        assert "gen1-secret-value" in masker_for(store, state)(line)  # no such task: not read


def test_a_secret_in_a_long_health_output_is_masked_before_the_line_is_cut() -> None:
    """The health output was cut to 200 characters before masking: a secret at the cut
    showed all but its last character."""
    secret = "s3cr3t-at-the-cut"
    output = "x" * 190 + secret + "y" * 500  # the old cut (at 200) fell inside it
    state = ControllerState(
        services={
            "web": ServiceState(
                spec=svc("web", secrets=(("K", secret),)),
                generation=1,
                slots={1: SlotState(last_exit=f"task t1 unhealthy: {output}")},
            )
        }
    )
    mask = kept_masker(state)
    masked = mask.plan(Plan(state))
    line = masked.state.services["web"].slots[1].last_exit
    assert len(line) == LINE_MAX
    assert "s3cr3t" not in line
    assert secret[:-1] not in line
    assert "***" in line
    assert mask.line("a" * (LINE_MAX - 5) + secret) == "a" * (LINE_MAX - 5) + "***"


def test_a_spec_diff_shows_no_registry_password_old_or_new() -> None:
    """`plan` and `apply --dry-run` printed both passwords in the registry_auth diff."""
    old = svc("app", registry_auth=RegistryAuth("reg:5000", "ci", "old-registry-pw"))
    new = replace(old, registry_auth=RegistryAuth("reg:5000", "ci2", "new-registry-pw"))
    (change,) = spec_diff(old, new)
    shown = f"{change.old} -> {change.new}"
    assert "registry-pw" not in shown
    assert shown == (
        "registry=reg:5000, username=ci, password=*** -> "
        "registry=reg:5000, username=ci2, password=***"
    )
    assert Masker(()).also([old, new])("pw old-registry-pw new-registry-pw") == "pw *** ***"


def test_plain_env_values_are_shown_secret_looking_ones_masked_whatever_their_length() -> None:
    web = svc(
        "web",
        env=(("UPSTREAM", "http://web:8080/"), ("API_TOKEN", "t1"), ("ROLE", "db")),
        secrets=(("K", "z"),),
    )
    mask = Masker(()).also([web])
    assert (
        mask("GET http://web:8080/ as db with t1 and z")
        == "GET http://web:8080/ as db with *** and ***"
    )
