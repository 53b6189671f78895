"""Live progress on the lab fleet: `minidock apply --wait` under a real pseudo-terminal draws
its live view (a frame per pass, a service row with its placed and healthy counts, the
rolling update's batch) and ends with one summary line; the same command on a pipe prints
plain lines only, each once, with no escape sequence."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios

from tests.integration.conftest import Minidock

COLUMNS, ROWS = 120, 40
REDRAW = re.compile(r"\x1b\[[0-9]*[AK]|\r")  # the live region's redraw: cursor up, erase
CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours, cursor hide and show
WEB = """\
[services.web]
image = "minidock-lab/web:{version}"
replicas = 3
update = {{ parallelism = 2, monitor = "0s" }}

[services.web.health]
cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"]
interval = "1s"
timeout = "5s"  # a loaded lab answers slowly; a slow check is not a sick task
retries = 3
start_period = "60s"  # a slow lab's first checks do not count against the task
"""


def on_a_terminal(md: Minidock, *args: str, patience: float = 240) -> tuple[int, str]:
    """`minidock ARGS` with stdin, stdout and stderr on a new pseudo-terminal of
    COLUMNS x ROWS (while $COLUMNS says 200, as md's environment does): its exit code and
    every byte the terminal got."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**md.env(), "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "minidock", *args],
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    got = bytearray()
    try:
        while select.select([master], [], [], patience)[0]:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # EIO: the command ended and closed its terminal
                break
            if not chunk:
                break
            got += chunk
        else:
            proc.kill()
            raise AssertionError(f"no output for {patience}s:\n{got.decode(errors='replace')}")
        code = proc.wait(timeout=60)
    finally:
        os.close(master)
    return code, got.decode()


def lines_of(output: str) -> list[str]:
    """What the terminal showed, as lines: each redraw's erases a line break."""
    text = CONTROL.sub("", REDRAW.sub("\n", output.replace("\r\n", "\n")))
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def test_apply_wait_draws_a_live_view_on_a_terminal_and_plain_lines_on_a_pipe(
    md: Minidock,
) -> None:
    piped = md("apply", str(md.spec(WEB.format(version=5))), "--wait", "--timeout", "120s")
    assert piped.returncode == 0, piped.stdout + piped.stderr
    assert "\x1b" not in piped.stdout + piped.stderr
    plain = piped.stdout.splitlines()
    assert len(plain) == len(set(plain)), plain  # one line per event, none repeated
    assert sum(line.startswith("started web.") for line in plain) == 3
    assert plain[-1] == "converged"
    assert piped.stderr == ""

    spec = md.spec(WEB.format(version=6))  # a rolling update, two tasks at a time
    code, raw = on_a_terminal(md, "apply", str(spec), "--wait", "--timeout", "180s")
    screen = lines_of(raw)
    assert code == 0, "\n".join(screen)
    assert "\x1b[?25l" in raw  # a live region: the cursor hidden while it draws ...
    assert raw.count("\x1b[?25h") == 1  # ... and shown again once, at the end
    assert screen[0] == "generation 2: itest (1 services)"
    titles = {line.split(",")[0] for line in screen if re.match(r"pass \d+, ", line)}
    assert {"pass 1", "pass 2", "pass 3"} <= titles, screen  # a frame per pass
    header = ["service", "wanted", "placed", "healthy", "state", "rollout"]
    assert header in [line.split() for line in screen]
    # the update's first pass starts 2 of 3 replacements: a frame shows its first batch
    first_batch = [line for line in screen if line.startswith("web ") and "batch 1 of 2" in line]
    assert first_batch, screen
    assert re.match(r"web +3 +3 +\d +updating +updating 0/3, batch 1 of 2 \(2 in flight\)$",
                    first_batch[0]), first_batch  # fmt: skip
    assert any(re.fullmatch(r"web +3 +3 +3 +converged", line) for line in screen)  # the end
    assert all(len(line) <= COLUMNS for line in screen if line.startswith(("web ", "waiting")))
    started = [line for line in screen if line.startswith("started web.")]
    assert len(started) == len(set(started)) == 3  # acts above the view, each once
    assert re.fullmatch(r"converged: 1 service, 3 tasks healthy in [0-9hms.]+", screen[-1])
    images = {t["image"] for t in md.tasks("web")}
    assert images == {"minidock-lab/web:6"}
