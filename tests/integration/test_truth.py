"""Operator truth on the lab fleet (issue 27): exit codes decided from what can progress,
causes carried to the top, `forget` that probes first, interrupts that lose no event."""

from __future__ import annotations

import json
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.integration.conftest import Fleet, Minidock, patient_inventory

HEALTH = """
[services.{name}.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""

WEB_AND_API = (
    """
[services.web]
image = "minidock-lab/web:5"
replicas = 3
ports = ["8080:8080"]
constraints = ["zone != c"]
"""
    + HEALTH.format(name="web")
    + """
[services.api]
image = "minidock-lab/web:5"
replicas = 3
depends_on = ["web"]
constraints = ["zone != c"]
"""
    + HEALTH.format(name="api")
)


def test_a_paused_host_that_leaves_nothing_able_to_progress_exits_4_every_pass(
    md: Minidock, fleet: Fleet
) -> None:
    """The issue's outage: host2 paused; web.2 fits nowhere (8080 is taken on host1 and
    host3, host4 is zone c), so web is never all healthy and api.2 never starts. Nothing
    can progress: once host2 is down every pass exits 4 (it exited 3 for ever)."""
    res = md("apply", str(md.spec(WEB_AND_API)), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    fleet.kill("host2", "pause")
    first = md("reconcile")
    assert first.returncode == 3, first.stderr  # one failed probe of down_after = 2
    assert "host2: unreachable (1/2 failed probes)" in first.stderr
    passes = [md("reconcile") for _ in range(3)]
    assert [p.returncode for p in passes] == [4, 4, 4], [p.stderr for p in passes]
    line = passes[-1].stderr
    assert line.startswith("minidock: degraded: host2 down; web.2 pending; api.2 pending on web")
    assert line.count("\n") == 1, line
    status = md.status()
    assert {s["name"]: s["state"] for s in status["services"]}["web"] == "degraded"


WEB = """
[services.web]
image = "minidock-lab/web:5"
replicas = 3
constraints = ["zone != c"]
""" + HEALTH.format(name="web")


def events(md: Minidock, kind: str) -> list[dict[str, Any]]:
    res = md("events", "--json")
    assert res.returncode == 0, res.stderr
    return [e for e in json.loads(res.stdout) if e["kind"] == kind]


def test_forget_probes_the_host_first(md: Minidock, fleet: Fleet) -> None:
    """A host that answers is refused, saying it answered now; right after `lab kill host2
    --mode stop` (no pass has seen it fail, the state still says ready) forget probes it,
    finds it gone and writes off the task it ran (it said "host2 answers its probes")."""
    res = md("apply", str(md.spec(WEB)), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    refused = md("forget", "host2")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("minidock: host2 answered now: `minidock drain host2`")
    on_host2 = {t["slot"]: t["id"] for t in md.tasks("web") if t["host"] == "host2"}
    fleet.kill("host2", "stop")
    forgot = md("forget", "host2")
    assert forgot.returncode in (0, 3), forgot.stdout + forgot.stderr
    lost = [(e["slot"], e["message"]) for e in events(md, "task-lost")]
    assert lost == [(n, f"web.{n}: task {t} lost with host2") for n, t in on_host2.items()]


def test_forget_of_a_host_whose_slots_were_refilled_keeps_their_records(
    md: Minidock, fleet: Fleet, tmp_path: Path
) -> None:
    """Once host3 is down and its slot refilled on another host, forget host3 writes off only
    the stale task host3 ran; the replacement keeps its slot (it logged task-lost for the
    healthy replacements and cleared their records), so nothing starts or stops after."""
    # probes patient with a loaded engine: a slow docker ps must not trip the mass-loss
    # guard; a stopped host3 still refuses at once
    md.inventory = patient_inventory(fleet, tmp_path / "inventory.toml")
    res = md("apply", str(md.spec(WEB)), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    stale = {t["slot"]: t["id"] for t in md.tasks("web") if t["host"] == "host3"}
    fleet.kill("host3", "stop")
    for _ in range(6):
        if md("reconcile").returncode == 4:  # degraded: host3 down, every slot refilled
            break
    replacements = {t["slot"]: (t["id"], t["host"]) for t in md.tasks("web")}
    assert sorted(replacements) == [1, 2, 3]
    assert all(host != "host3" for _, host in replacements.values())
    forgot = md("forget", "host3")
    assert forgot.returncode == 4, forgot.stdout + forgot.stderr  # host3 still down
    assert "started " not in forgot.stdout
    assert "stopped " not in forgot.stdout
    lost = [(e["slot"], e["message"]) for e in events(md, "task-lost")]
    assert lost == [(n, f"web.{n}: task {t} lost with host3") for n, t in stale.items()]
    after = md("reconcile")
    assert after.returncode == 4, after.stdout + after.stderr
    assert after.stdout == ""
    assert {t["slot"]: (t["id"], t["host"]) for t in md.tasks("web")} == replacements


def test_an_empty_known_hosts_is_named_by_apply_and_plan(md: Minidock, tmp_path: Path) -> None:
    """Issue 27 item 2: with an inventory whose known_hosts is empty, every probe fails on
    the host key. apply printed only the mass-loss guard's line (pointing at --force-down)
    and plan "does not converge" with no reason; both now carry the hosts' own reason,
    grouped: "4 of 4 hosts (...): host key unknown: is not in .../known_hosts"."""
    lab = tomllib.loads(md.fleet.inventory.read_text())
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    identity = (md.fleet.inventory.parent / lab["defaults"]["identity_file"]).resolve()
    lab["defaults"] |= {"known_hosts": str(empty), "identity_file": str(identity)}
    md.inventory = tmp_path / "inventory.toml"
    md.inventory.write_text(tomli_w.dumps(lab))
    spec = md.spec(WEB)
    n = len(lab["hosts"])
    named = f"host1, host2, host3, and {n - 3} more"
    cause = f"{n} of {n} hosts ({named}): host key unknown: is not in {empty}"
    applied = md("apply", str(spec))
    assert applied.returncode == 1, applied.stdout + applied.stderr
    why = applied.stderr.splitlines()[-1]
    assert why.startswith("minidock: failed: mass-loss guard: ")
    assert why.endswith(f"; probes failed: {cause}"), why
    planned = md("plan", str(spec))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert f"probes failed: {cause}" in planned.stdout.splitlines(), planned.stdout


SLOW_STOP = """
[services.web]
image = "minidock-lab/web:5"
replicas = {replicas}
constraints = ["zone != c"]
stop_signal = "SIGUSR1"      # the lab's init passes on TERM and INT only: this one waits
stop_grace_period = "8s"     # out the grace period, so a stop is an act under way for 8 s
"""


def test_sigint_during_apply_wait_lets_the_acts_finish_and_records_them(
    md: Minidock, fleet: Fleet
) -> None:
    """Issue 27 item 4: a real SIGINT to a real `minidock apply --wait` while its pass
    stops two tasks (8 s each): the stops finish, their events are recorded, and it exits
    130 with one line (it exited 130 silently, the acts' events lost)."""
    res = md("apply", str(md.spec(SLOW_STOP.format(replicas=3))), "--wait", "--timeout", "90s")
    assert res.returncode == 0, res.stdout + res.stderr
    spec = md.spec(SLOW_STOP.format(replicas=1))
    proc = md.popen("apply", str(spec), "--wait", "--timeout", "90s")
    for _ in range(200):  # until generation 2 is stored: its passes are then under way
        if [e for e in events(md, "apply") if "generation 2" in e["message"]]:
            break
    time.sleep(0.5)  # observe and decide: the stops start (and take 8 s)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    last = err.splitlines()[-1]
    assert last == "minidock: interrupted: 2 acts done, recorded; run reconcile to go on", err
    stopped = [e for e in events(md, "stop") if e["message"].startswith("stopped web.")]
    assert sorted(e["slot"] for e in stopped) == [2, 3], stopped
    assert sum("stopped web." in line for line in out.splitlines()) == 2, out
    assert len(md.tasks("web")) == 1
    after = md("reconcile")
    assert after.returncode == 0, after.stdout + after.stderr
