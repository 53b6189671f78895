"""minidock.output: plain lines on a pipe, rich on a terminal or when rich is told to."""

from __future__ import annotations

import pytest

from minidock.output import RICH_SAYS, Output


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Piped:
    """stdout on a pipe (pytest's capture: not a terminal), rich told nothing."""
    for name in RICH_SAYS:
        monkeypatch.delenv(name, raising=False)
    return Piped(capsys)


class Piped:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def getvalue(self) -> str:
        return self.capsys.readouterr().out


def test_a_line_on_a_pipe_is_written_as_it_is(piped: Piped) -> None:
    shown = Output()
    text = "[itest] started web.1 :smile: [bold]x[/bold] " + "y" * 300
    shown.print(text, markup=False)
    shown.print("no markup asked for [red]either[/red]")
    assert piped.getvalue() == f"{text}\nno markup asked for [red]either[/red]\n"
    assert not shown.is_terminal


def test_a_table_goes_to_rich_even_on_a_pipe(piped: Piped) -> None:
    from rich.table import Table

    table = Table("task", "host")
    table.add_row("web.1", "host1")
    Output().print(table)
    shown = piped.getvalue()
    assert "web.1" in shown
    assert "host1" in shown


def test_force_color_hands_the_stream_to_rich(
    piped: Piped, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    shown = Output()
    assert shown.is_terminal  # as rich decides it
    shown.print("[bold]x[/bold]")
    assert "\x1b[1m" in piped.getvalue()  # rich rendered the markup
