"""Supervision on the real lab fleet, through the real CLI: a crash loop that ends Failed
after exactly max_attempts and stays so until `reset`, a db + web stack in dependency
order (start and stop), desired = "stopped", cycles rejected at apply, and the cron
contract's exit codes (0 converged, 3 progressing, 1 Failed, 75 locked).

Every assertion reads the hosts (docker exec), the event log, or `status --json`."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minidock.store.directory import StateLock
from tests.integration.conftest import Fleet, Minidock

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"
SECRET = "s3cret-never-logged"  # playbooks/stack.toml's DB_PASSWORD

CRASHER = """
[services.crasher]
image = "minidock-lab/crash:1"
replicas = 1

[services.crasher.restart]
condition = "on-failure"
delay = "1s"
max_delay = "2s"
max_attempts = 3
window = "5m"
"""

WEB3 = """
[services.web]
image = "minidock-lab/web:5"
replicas = 3
desired = "{desired}"

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
"""


def playbook_body(name: str) -> str:
    """A playbook's services, without its `cluster` and `inventory` lines (md.spec adds
    its own, pointing at the lab)."""
    lines = (PLAYBOOKS / name).read_text().splitlines()
    return "\n".join(x for x in lines if not re.match(r"(cluster|inventory)\s*=", x)) + "\n"


def events(md: Minidock) -> list[str]:
    res = md("events", "--limit", "1000")
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def runs(md: Minidock, service: str) -> list[str]:
    """`run` events of a service: one per task started."""
    return [e for e in events(md) if f" run: started {service}." in e]


def service(doc: dict[str, Any], name: str) -> dict[str, Any]:
    (s,) = [s for s in doc["services"] if s["name"] == name]
    return s


def all_containers(md: Minidock) -> list[str]:
    return [c for h in md.fleet.hosts for c in md.containers(h)]


def until(check: Callable[[], bool], timeout: float, interval: float = 0.3) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def reconcile_until(md: Minidock, codes: set[int], passes: int = 40, pause: float = 0.5) -> int:
    """`minidock reconcile` as cron runs it, until it exits with one of `codes`."""
    seen = []
    for _ in range(passes):
        res = md("reconcile")
        seen.append(res.returncode)
        assert res.returncode in (0, 1, 3), res.stdout + res.stderr
        if res.returncode in codes:
            return res.returncode
        time.sleep(pause)
    raise AssertionError(f"reconcile never exited with {codes}: {seen}")


# -- restarts and the crash-loop limit ---------------------------------------------------------
def test_crash_loop_fails_after_exactly_max_attempts_and_reset_runs_it_again(
    md: Minidock,
) -> None:
    spec = md.spec(CRASHER)
    res = md("apply", str(spec))
    assert res.returncode == 3, res.stdout + res.stderr  # a task started: progressing
    assert "started crasher.1." in res.stdout

    codes = []
    for _ in range(40):
        time.sleep(0.7)
        res = md("reconcile")
        codes.append(res.returncode)
        if res.returncode != 0 and res.returncode != 3:
            break
    assert codes[-1] == 1, (codes, res.stdout, res.stderr)
    assert set(codes[:-1]) <= {0, 3}
    assert 3 in codes  # at least one pass saw a backoff pending
    assert "FAILED crasher.1: task " in res.stderr
    assert "exited with code 1" in res.stderr

    started = runs(md, "crasher")
    assert len(started) == 3, started  # exactly 3 attempts
    assert "(place, minidock-lab/crash:1)" in started[0]
    assert all("(restart, minidock-lab/crash:1)" in e for e in started[1:])
    assert len([e for e in events(md) if " failed: crasher.1 failed" in e]) == 1

    doc = md.status()
    crasher = service(doc, "crasher")
    assert crasher["state"] == "failed"
    assert [f["slot"] for f in crasher["failed"]] == [1]
    assert "exited with code 1" in crasher["failed"][0]["last_exit"]
    assert "exited with code 1" in crasher["last_failure"]
    human = md("status")
    assert human.returncode == 0
    assert "FAILED" in human.stdout
    assert "crasher.1 FAILED: task" in human.stdout

    # Failed holds across more cron passes (each a fresh controller process), past max_delay
    time.sleep(2.5)  # the first past max_delay (2 s) since the failure, the others later
    for _ in range(3):
        res = md("reconcile")
        assert res.returncode == 1, res.stdout + res.stderr
        assert "started" not in res.stdout
    assert len(runs(md, "crasher")) == 3
    assert all_containers(md) == []  # the exited tasks were removed, nothing new started
    assert service(md.status(), "crasher")["state"] == "failed"

    # an identical apply does not clear it
    assert md("apply", str(spec)).returncode == 1
    assert len(runs(md, "crasher")) == 3

    # reset: the slot runs again
    res = md("reset", "crasher")
    assert res.returncode in (0, 3), res.stdout + res.stderr
    assert "reset crasher" in res.stdout
    assert "started crasher.1." in res.stdout
    assert len(runs(md, "crasher")) == 4
    after = service(md.status(), "crasher")
    assert after["failed"] == []
    assert after["state"] != "failed"


def _crasher_task(md: Minidock, state: str) -> tuple[str, str]:
    """The host and name of the crasher's one container, once it is in `state`."""
    found: list[tuple[str, str]] = []

    def there() -> bool:
        found[:] = [
            (h, line.split()[0])
            for h in md.fleet.hosts
            for line in md.containers(h)
            if line.startswith("crasher.1.") and line.split()[1] == state
        ]
        return len(found) == 1

    assert until(there, 60), [md.containers(h) for h in md.fleet.hosts]
    return found[0]


def test_a_short_backoff_is_carried_by_the_pass_that_sees_the_exit(md: Minidock) -> None:
    """restart.delay 500 ms (CARRIED_BACKOFF, core.supervise): the one cron pass that sees
    the task's exit removes it and starts its replacement on real hosts (before, a second
    pass did). That its `docker run` waited out the rest of the backoff is held by
    tests/unit/test_supervise.py's FakeExecutor test: from outside, a pass's own set-up
    here takes longer than the rest, so no lab clock tells the wait apart."""
    spec = md.spec(CRASHER.replace('delay = "1s"', 'delay = "500ms"').replace("2s", "500ms"))
    res = md("apply", str(spec))
    assert res.returncode == 3, res.stdout + res.stderr
    _, old = _crasher_task(md, "exited")
    res = md("reconcile")
    assert res.returncode == 3, res.stdout + res.stderr
    assert f"removed {old}" in res.stdout, res.stdout
    assert "(restart, minidock-lab/crash:1)" in res.stdout, res.stdout  # in that very pass
    assert len(runs(md, "crasher")) == 2
    _, new = _crasher_task(md, "exited")  # the replacement, started and crashed
    assert new != old


def test_a_changing_apply_clears_failed(md: Minidock) -> None:
    body = CRASHER.replace("max_attempts = 3", "max_attempts = 1")
    assert md("apply", str(md.spec(body))).returncode == 3
    assert reconcile_until(md, {1}) == 1
    assert len(runs(md, "crasher")) == 1
    changed = body.replace("replicas = 1", 'replicas = 1\nenv = { TRY = "2" }')
    res = md("apply", str(md.spec(changed)))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "FAILED" not in res.stderr
    assert len(runs(md, "crasher")) == 2  # the cleared slot ran again
    assert reconcile_until(md, {1}) == 1  # and, crashing again, is Failed again
    assert len(runs(md, "crasher")) == 2


def test_failed_status_shows_the_log_tail_and_never_a_secret(md: Minidock) -> None:
    body = f"""
[services.leaky]
image = "minidock-lab/crash:1"
command = ["sh", "-c", "echo booting with password $DB_PASSWORD; sleep 1; exit 3"]
env = {{ DB_PASSWORD = "{SECRET}" }}
restart = {{ condition = "any", delay = "1s", max_delay = "1s", max_attempts = 1 }}
"""
    applied = md("apply", str(md.spec(body)))
    assert applied.returncode == 3, applied.stdout + applied.stderr
    time.sleep(1.5)
    res = md("reconcile")
    assert res.returncode == 1, res.stdout + res.stderr
    doc = md.status()
    leaky = service(doc, "leaky")
    (failed,) = leaky["failed"]
    assert "exited with code 3" in failed["last_exit"]
    assert "booting with password" in failed["last_exit"]  # the log tail
    human = md("status").stdout
    outputs = {
        "apply": applied.stdout + applied.stderr,
        "reconcile": res.stdout + res.stderr,
        "status --json": json.dumps(doc),
        "status": human,
        "events": "\n".join(events(md)),
    }
    leaks = [where for where, text in outputs.items() if SECRET in text]
    assert leaks == [], f"secret in: {leaks}"


# -- dependencies -----------------------------------------------------------------------------
def test_stack_web_waits_for_db_health_and_stops_first(md: Minidock, fleet: Fleet) -> None:
    body = playbook_body("stack.toml")
    assert 'depends_on = ["db"]' in body
    applied = res = md("apply", str(md.spec(body)))
    assert res.returncode == 3, res.stdout + res.stderr
    assert "started web." not in res.stdout
    assert "pending web.1: waiting for dependency db to be healthy" in res.stdout
    assert [c.split(".")[:2] for c in all_containers(md)] == [["db", "1"]]

    doc = md.status()  # one observation: the plan in it agrees with the health it saw
    (db,) = [t for t in doc["tasks"] if t["service"] == "db"]
    pending = {p["slot"] for p in service(doc, "web")["pending"]}
    assert pending == (set() if db["health"] == "healthy" else {1, 2}), (db, pending)

    # cron passes until converged; right after the pass that starts web, read db's health
    # probes from its host (Docker keeps the last 5, 1 s apart) to judge web's start
    outputs, db_probes = [], []
    for _ in range(40):
        time.sleep(0.5)
        res = md("reconcile")
        assert res.returncode in (0, 3), res.stdout + res.stderr
        outputs.append(res.stdout)
        if "started web." in res.stdout and not db_probes:
            db_probes = health_log(fleet, md)
        if res.returncode == 0:
            break
    assert res.returncode == 0, outputs
    assert db_probes, outputs
    doc = md.status()
    assert service(doc, "db")["healthy"] == 1
    assert service(doc, "web")["healthy"] == 2
    assert {service(doc, n)["state"] for n in ("db", "web")} == {"converged"}
    db_task = next(t for t in doc["tasks"] if t["service"] == "db")
    webs = [t for t in doc["tasks"] if t["service"] == "web"]
    assert len(webs) == 2
    for t in webs:
        created = _docker_time(fleet, t["host"], t["name"], "{{.Created}}")
        before = [p for p in db_probes if _parse(p["End"]) <= created]
        assert before, (created, db_probes)
        assert before[-1]["ExitCode"] == 0, before  # db was healthy when web was created

    # the secret reached db, and nothing MiniDock prints or keeps in its log shows it
    env = fleet.docker(db_task["host"], "exec", db_task["name"], "env").stdout
    assert f"DB_PASSWORD={SECRET}" in env
    printed = {
        "apply": applied.stdout + applied.stderr,
        "passes": "\n".join(outputs),
        "status": md("status").stdout + json.dumps(md.status()),
        "events": "\n".join(events(md)),
    }
    assert [k for k, v in printed.items() if SECRET in v] == []

    # both desired stopped: web stops first, db only once web is gone
    stopped = body.replace("[services.db]\n", '[services.db]\ndesired = "stopped"\n')
    stopped = stopped.replace("[services.web]\n", '[services.web]\ndesired = "stopped"\n')
    res = md("apply", str(md.spec(stopped)))
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.count("stopped web.") == 2
    assert [c.split(".")[0] for c in all_containers(md)] == ["db"]  # db waits for web
    assert md("reconcile").returncode == 3  # now db stops
    assert all_containers(md) == []
    assert md("reconcile").returncode == 0


def health_log(fleet: Fleet, md: Minidock) -> list[dict[str, Any]]:
    """The db task's recent health probes (Start, End, ExitCode), oldest first."""
    (name,) = [c.split()[0] for h in fleet.hosts for c in md.containers(h) if c.startswith("db.")]
    host = next(h for h in fleet.hosts if any(c.startswith(name) for c in md.containers(h)))
    res = fleet.docker(host, "inspect", "-f", "{{json .State.Health.Log}}", name, check=True)
    probes: list[dict[str, Any]] = json.loads(res.stdout)
    return sorted(probes, key=lambda p: _parse(p["End"]))


def _docker_time(fleet: Fleet, host: str, name: str, fmt: str) -> float:
    res = fleet.docker(host, "inspect", "-f", fmt, name, check=True)
    return _parse(res.stdout.strip())


def _parse(value: str) -> float:
    from minidock.commands.facts import parse_time

    at = parse_time(value)
    assert at is not None, value
    return at


def test_cycles_and_unknown_names_are_rejected_at_apply(md: Minidock) -> None:
    cyclic = """
[services.a]
image = "minidock-lab/web:5"
depends_on = ["c"]

[services.b]
image = "minidock-lab/web:5"
depends_on = ["a"]

[services.c]
image = "minidock-lab/web:5"
depends_on = ["b"]
"""
    res = md("apply", str(md.spec(cyclic)))
    assert res.returncode == 2
    assert "dependency cycle: a -> c -> b -> a" in res.stderr
    unknown = '[services.a]\nimage = "minidock-lab/web:5"\ndepends_on = ["dbb"]\n'
    res = md("apply", str(md.spec(unknown)))
    assert res.returncode == 2
    assert "unknown service 'dbb'" in res.stderr
    assert all_containers(md) == []
    assert md("reconcile").returncode == 2  # nothing was ever stored


# -- desired stopped ---------------------------------------------------------------------------
def test_desired_stopped_removes_the_containers_and_running_restores_them(
    md: Minidock, fleet: Fleet
) -> None:
    res = md("apply", str(md.spec(WEB3.format(desired="running"))), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    names = [c.split()[0] for c in all_containers(md)]
    assert len(names) == 3
    first = next(h for h in fleet.hosts if md.containers(h))
    task = md.containers(first)[0].split()[0]
    policy = fleet.docker(first, "inspect", "-f", "{{.HostConfig.RestartPolicy.Name}}", task)
    assert policy.stdout.strip() == "no"  # the controller owns restarts, not dockerd
    assert md("reconcile").returncode == 0  # converged: the cron pass exits 0

    res = md("apply", str(md.spec(WEB3.format(desired="stopped"))))
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.count("stopped web.") == 3
    assert all_containers(md) == []  # stopped *and* removed, on every host
    assert md("reconcile").returncode == 0
    web = service(md.status(), "web")
    assert (web["state"], web["running"], web["desired"]) == ("stopped", 0, "stopped")

    res = md("apply", str(md.spec(WEB3.format(desired="running"))), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    back = [c for c in all_containers(md) if c.endswith("running")]
    assert sorted(int(c.split(".")[1]) for c in back) == [1, 2, 3]
    assert not set(names) & {c.split()[0] for c in back}  # new tasks, not the old ones
    web = service(md.status(), "web")
    assert (web["state"], web["healthy"]) == ("converged", 3)


def test_a_second_reconcile_exits_75_while_one_holds_the_lock(md: Minidock) -> None:
    assert md("apply", str(md.spec(WEB3.format(desired="stopped")))).returncode == 0
    with StateLock(md.state):  # held until it answers: a reconcile that waited would not
        res = md("reconcile")
        assert res.returncode == 75, res.stdout + res.stderr
    assert md("reconcile").returncode == 0
