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


def test_a_states_slots_are_masked_and_cut_and_a_slot_with_nothing_to_mask_is_itself() -> None:
    """Only the slots whose line changes are new records: the others are the very ones
    given (a commit then finds them unchanged by identity, codec.StateRecords)."""
    secret = "hunter2-in-a-log"
    slots = {
        1: SlotState(last_exit=f"exit 1: password {secret}"),
        2: SlotState(last_exit="x" * (LINE_MAX + 40)),
        3: SlotState(last_exit="exit 0"),
        4: SlotState(),
    }
    spec = svc("web", secrets=(("K", secret),))
    state = ControllerState(services={"web": ServiceState(spec=spec, generation=1, slots=slots)})
    masked = kept_masker(state).state(state).services["web"].slots
    assert masked[1].last_exit == "exit 1: password ***"
    assert masked[2].last_exit == "x" * (LINE_MAX - 3) + "..."
    assert [n for n in slots if masked[n] is slots[n]] == [3, 4]


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


class CountingStore:
    """A store whose generation reads are counted (the masker's only store reads)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store, self.reads = store, 0

    def next_generation_id(self) -> int:
        return self.store.next_generation_id()

    def generation(self, gen_id: int) -> Cluster | None:
        self.reads += 1
        return self.store.generation(gen_id)


def task_of(spec: str, slot: int) -> Container:
    return Container(
        f"id{slot}", f"web.{slot}.t{slot}", "h1", "c", "web", slot, "t", spec, "w", "running"
    )


def test_a_command_builds_its_masker_once_and_extends_it_only_for_a_secret_it_has_not_met(
    tmp_path: Path,
) -> None:
    """One masker per command (issue 19.4): a later pass given the masker of the earlier
    one gets that very masker back, without reading the store, while it holds every secret
    the pass meets; a task of a generation it has not looked up, or a new generation,
    extends it, and what it masked before stays masked."""
    with SQLiteStore.open(tmp_path / "state") as raw:
        for n in (1, 2, 3, 4):
            raw.commit(ControllerState(generation=n), generation=generation(n))
        gen1, gen2, gen3, gen4 = (generation(n).services[0] for n in (1, 2, 3, 4))
        state = ControllerState(
            generation=4, services={"web": ServiceState(spec=gen4, previous=gen3, generation=4)}
        )
        on = Observed({"h1": HostObservation("h1", True, (task_of(gen1.spec_hash(), 1),))})
        store = CountingStore(raw)
        first = masker_for(store, state, on)  # type: ignore[arg-type]
        assert store.reads == 4  # gens 4, 3, 2, 1: newest first, until gen 1's task is known
        for _ in range(3):  # the command's next passes: the same masker, no store read
            assert masker_for(store, state, on, known=first) is first  # type: ignore[arg-type]
        assert store.reads == 4
        both = (task_of(gen1.spec_hash(), 1), task_of(gen2.spec_hash(), 2))
        more = masker_for(  # a host answers with a task still on gen 2
            store,  # type: ignore[arg-type]
            state,
            Observed({"h1": HostObservation("h1", True, both)}),
            known=first,
        )
        assert more is not first
        assert store.reads == 4 + 3
        line = " ".join(f"gen{n}-secret-value" for n in (1, 2, 3, 4))
        assert more(line) == "*** *** *** ***"
        gen5 = svc("web", image="web:5", secrets=(("DB_PASSWORD", "gen5-secret-value"),))
        raw.commit(ControllerState(generation=5), generation=Cluster("c", "c.toml", "i", (gen5,)))
        applied = replace(
            state,
            generation=5,
            services={"web": ServiceState(spec=gen5, previous=gen4, generation=5)},
        )
        newer = masker_for(store, applied, on, known=more)  # type: ignore[arg-type]
        assert newer(line + " gen5-secret-value") == "*** *** *** *** ***"
