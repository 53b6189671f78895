"""A batch (`SSHExecutor.run_batch`): the script `batch_script` writes, run here by the
local POSIX sh as sshd's login shell runs it, and `parse_batch`'s reading of its framed
output. Over real SSH: tests/integration/test_ssh.py."""

from __future__ import annotations

import subprocess

from minidock.ssh import Result, Step, batch_script, parse_batch

MARKER = "@@minidock-0123456789abcdef"


def ran(steps: list[Step]) -> list[Result | None] | None:
    script = batch_script(steps, MARKER)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    return parse_batch(done.stdout, done.stderr, MARKER, len(steps))


def test_each_step_has_its_own_stdout_stderr_and_status_and_a_failure_stops_nothing() -> None:
    found = ran(
        [
            Step(("sh", "-c", "echo one; echo err1 >&2; exit 3")),
            Step(("printf", "no newline")),
            Step(("sh", "-c", "echo err3 >&2")),
        ]
    )
    assert found == [
        Result(3, "one\n", "err1\n"),
        Result(0, "no newline", ""),
        Result(0, "", "err3\n"),
    ]


def test_every_argv_is_quoted_once_hostile_words_arrive_as_they_are() -> None:
    tricky = ("it's", "$(id)", "a b", '"q"', "`x`", "; rm -rf /", "*", "", "\n", "$w")
    (found,) = ran([Step(("printf", r"[%s]\n", *tricky))]) or [None]
    assert found is not None
    assert found.stdout == "".join(f"[{t}]\n" for t in tricky)


def test_a_step_given_ids_gets_the_hex_words_an_earlier_step_printed() -> None:
    found = ran(
        [
            Step(("printf", r"abc123\nnot-an-id\n$(id)\ndef456\n")),
            Step(("echo", "inspect"), ids_from=0),
        ]
    )
    assert found == [
        Result(0, "abc123\nnot-an-id\n$(id)\ndef456\n", ""),
        Result(0, "inspect abc123 def456\n", ""),
    ]


def test_a_step_given_ids_is_skipped_when_its_source_failed_or_printed_none() -> None:
    found = ran(
        [
            Step(("sh", "-c", "echo abc123; exit 1")),
            Step(("echo", "inspect"), ids_from=0),
            Step(("true",)),
            Step(("echo", "inspect"), ids_from=2),
        ]
    )
    assert found == [Result(1, "abc123\n", ""), None, Result(0, "", ""), None]


def test_output_that_is_not_all_framed_reads_as_not_run() -> None:
    steps = [Step(("echo", "a")), Step(("echo", "b"))]
    script = batch_script(steps, MARKER)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert parse_batch(done.stdout, done.stderr, MARKER, 2) is not None
    cut = done.stdout[: done.stdout.index(f"\n{MARKER} 1 ")]  # killed inside step 1
    assert parse_batch(cut, done.stderr, MARKER, 2) is None
    assert parse_batch("sh: not found\n", "", MARKER, 2) is None
    assert parse_batch(done.stdout.replace(" 0\n", " x\n"), done.stderr, MARKER, 2) is None
