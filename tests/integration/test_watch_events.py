"""`minidock watch` on the real lab fleet reacts to docker events (issue 26): a killed task
is replaced within one pass under a 30 s or 60 s interval, by passes that probe only the host
that rang (a quiet host's docker runs no `ps` meanwhile), a broken event stream is reopened, a
paused host is noticed by the pooled connection's keepalives between probes, and a host
whose docker answers late is slow, never down. Assertions read the hosts themselves."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.integration.conftest import Fleet, Minidock
from tests.integration.test_faults import Lines, wait_for

WEB = """
[services.web]
image = "minidock-lab/web:5"
replicas = 2
constraints = ["zone != c"]

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "2s"
retries = 2
"""


def tuned(fleet: Fleet, path: Path, **defaults: Any) -> Path:
    """The lab's inventory with these [defaults] (paths made absolute), written to `path`."""
    lab = tomllib.loads(fleet.inventory.read_text())
    base = fleet.inventory.parent
    for key in ("identity_file", "known_hosts"):
        lab["defaults"][key] = str((base / lab["defaults"][key]).resolve())
    lab["defaults"] |= defaults
    path.write_text(tomli_w.dumps(lab))
    return path


def running(md: Minidock, host: str) -> list[str]:
    return [line.split()[0] for line in md.containers(host) if line.endswith(" running")]


def stream_pids(fleet: Fleet, host: str) -> set[str]:
    """The pids of the `docker events` processes on a host (the watch's stream)."""
    found = fleet.exec(host, "pgrep", "-f", "docker events")
    return set(found.stdout.split())


WORKERS = ("host1", "host2", "host3")


def kill_and_wait_for_replacement(md: Minidock, fleet: Fleet, host: str, out: Lines) -> float:
    """docker kill one of the host's web tasks; the seconds until two others run."""
    victim = running(md, host)[0]
    fleet.docker(host, "kill", victim, check=True)

    def replaced() -> bool:
        names = [n for h in WORKERS for n in running(md, h)]
        return len(names) == 2 and victim not in names

    try:  # the interval is 30 s or more: only an event makes it this soon
        return wait_for(f"a replacement of {victim} running", replaced, timeout=20)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; watch printed: {out.text()}") from None


def stop(watcher: subprocess.Popen[str]) -> str:
    watcher.send_signal(signal.SIGINT)
    _, err = watcher.communicate(timeout=30)
    return err


COUNTED = "/tmp/docker-calls"  # on a host whose docker is wrapped: one line per command


def wrap_docker(fleet: Fleet, host: str, line: str) -> None:
    """Wrap the host's docker CLI: the shell `line` runs before each of its commands."""
    fleet.exec(
        host,
        "sh",
        "-c",
        f"mv /usr/bin/docker /usr/bin/docker.real && printf '%s\\n' '#!/bin/sh' '{line}' "
        "'exec /usr/bin/docker.real \"$@\"' > /usr/bin/docker && chmod +x /usr/bin/docker",
        check=True,
    )


def unwrap_docker(fleet: Fleet, host: str) -> None:
    fleet.exec(host, "mv", "/usr/bin/docker.real", "/usr/bin/docker", check=True)


def calls_of(fleet: Fleet, host: str, command: str) -> int:
    """How many `docker COMMAND` the host's wrapped docker ran."""
    found = fleet.exec(host, "sh", "-c", f"cat {COUNTED} 2>/dev/null || true", check=True)
    return sum(1 for line in found.stdout.splitlines() if line.startswith(f"{command} "))


def probes_of(fleet: Fleet, host: str) -> int:
    """How many `docker ps` the host's wrapped docker ran (each probe runs one)."""
    return calls_of(fleet, host, "ps")


SETTLED = 5.0  # seconds without a probe: host4's stream rang on coming up and was probed


def settled_probes(fleet: Fleet, host: str) -> int:
    """The host's probes once they stop: none for SETTLED seconds. Its stream rings once,
    1 s after it starts (streams.UP_AFTER), and a pass probes it at once; between resyncs
    (60 s here) a host whose stream is up and silent is not probed again. A wait, not an
    assertion: a probe more than SETTLED seconds after its ring would be counted after."""
    count, since = probes_of(fleet, host), time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < SETTLED:
        assert time.monotonic() < deadline, f"{host}'s probes did not stop: {count}"
        time.sleep(0.5)
        now = probes_of(fleet, host)
        if now != count:
            count, since = now, time.monotonic()
    return count


def test_a_killed_task_is_replaced_at_once_probing_only_its_host_and_a_broken_stream_reopens(
    fleet: Fleet, tmp_path: Path
) -> None:
    md = Minidock(
        fleet, tmp_path, inventory=tuned(fleet, tmp_path / "lab.toml", probe_timeout="15s")
    )
    res = md("apply", str(md.spec(WEB)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    host = next(h for h in WORKERS if running(md, h))
    quiet = "host4"  # zone c: never a task of web, nothing happens there
    wrap_docker(fleet, quiet, f'echo "$*" >> {COUNTED}')
    watcher = md.popen("watch", "--interval", "60s")  # no resync while host4 is counted
    out = Lines(watcher)
    try:
        wait_for("the host's event stream", lambda: stream_pids(fleet, host), 20)
        wait_for("host4's event stream", lambda: calls_of(fleet, quiet, "events"), 20)
        baseline = settled_probes(fleet, quiet)
        # the first (full) pass probed host4, and the pass its stream rang on coming up; one
        # more when another host's stream came up first, in a pass that probed host4 as a
        # host whose stream was not up yet (the streams start side by side: on a loaded
        # machine not within one coalesced pass)
        assert baseline >= 2
        first = kill_and_wait_for_replacement(md, fleet, host, out)
        # the kill rang only its host: the passes that replaced the task left host4 alone
        assert probes_of(fleet, quiet) == baseline
        host = next(h for h in WORKERS if running(md, h))
        wait_for("the host's event stream", lambda: stream_pids(fleet, host), 20)
        before = stream_pids(fleet, host)  # break the stream: its process on the host killed
        fleet.exec(host, "pkill", "-f", "docker events", check=True)
        wait_for("the stream reopened", lambda: stream_pids(fleet, host) - before, timeout=15)
        second = kill_and_wait_for_replacement(md, fleet, host, out)
        print(
            f"killed task replaced under watch --interval 60s after {first:.1f}s, "
            f"after the stream was reopened {second:.1f}s"
        )
    finally:
        err = stop(watcher)
        unwrap_docker(fleet, quiet)
        fleet.exec(quiet, "rm", "-f", COUNTED, check=True)
    printed = out.text()
    assert len([line for line in printed if line.startswith("started web.")]) == 2, printed
    assert "Traceback" not in err, err


def test_keepalives_notice_a_paused_host_between_probes_and_a_slow_docker_is_not_down(
    fleet: Fleet, tmp_path: Path
) -> None:
    inventory = tuned(
        fleet,
        tmp_path / "lab.toml",
        keepalive_interval="1s",
        keepalive_count_max=2,
        connect_timeout="2s",
        probe_timeout="2s",
        down_after=1,
    )
    md = Minidock(fleet, tmp_path, inventory=inventory)
    res = md("apply", str(md.spec(WEB)), "--wait", "--timeout", "60s")
    assert res.returncode == 0, res.stdout + res.stderr
    # a throttled host: its docker ps answers 3 s late, past probe_timeout (2 s)
    slow_host = "host3"
    wrap_docker(fleet, slow_host, 'case "$1" in ps) sleep 3 ;; esac')
    try:
        before = {h: running(md, h) for h in ("host1", "host2", "host3")}
        res = md("reconcile")
        assert res.returncode == 0, res.stdout + res.stderr
        doc = md.status()
        (seen,) = [h for h in doc["hosts"] if h["name"] == slow_host]
        assert (seen["state"], seen["slow"], seen["error"]) == ("ready", True, None), seen
        assert seen["answer_seconds"] > 3
        paused = "host4"  # zone c: no task of web there, so only the probes notice it
        watcher = md.popen("watch", "--interval", "30s")
        out = Lines(watcher)
        try:
            wait_for("the paused host's event stream", lambda: stream_pids(fleet, paused), 20)
            fleet.kill(paused, "pause")
            took = wait_for(
                "host-down of the paused host",
                lambda: any(line.startswith(f"host-down: {paused}") for line in out.text()),
                timeout=25,  # the interval is 30 s: only the keepalives notice it this soon
            )
            print(f"paused host noticed by keepalive under watch --interval 30s in {took:.1f}s")
        finally:
            err = stop(watcher)
            fleet.revive(paused)
        assert "Traceback" not in err, err
        assert {h: running(md, h) for h in ("host1", "host2", "host3")} == before
        events = json.loads(md("events", "--json").stdout)
        downs = [e["host"] for e in events if e["kind"] == "host-down"]
        assert downs == [paused], [e["kind"] for e in events]
    finally:
        unwrap_docker(fleet, slow_host)
