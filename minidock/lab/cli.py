"""`minidock lab`: the typer app for the lab fleet. `minidock.cli` loads this module only
when `minidock lab ...` runs (or the top-level help lists the commands)."""

from __future__ import annotations

import enum
import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from minidock.lab.directory import DEFAULT_PROJECT
from minidock.lab.errors import LabError
from minidock.lab.faults import KillMode
from minidock.lab.fleet import Lab
from minidock.lab.images import (
    KIND_NAMES,
    SET_NAMES,
    build_named,
    built_line,
    parse_kinds,
    parse_sets,
)

__all__ = ["lab_app"]


class Mode(enum.StrEnum):
    """The fault `lab kill` makes (KillMode as a typer choice)."""

    STOP = "stop"
    PAUSE = "pause"
    SSHD = "sshd"
    DOCKERD = "dockerd"
    PARTITION = "partition"
    DISK = "disk"
    SLOW = "slow"


_MODES: dict[Mode, KillMode] = {
    Mode.STOP: "stop",
    Mode.PAUSE: "pause",
    Mode.SSHD: "sshd",
    Mode.DOCKERD: "dockerd",
    Mode.PARTITION: "partition",
    Mode.DISK: "disk",
    Mode.SLOW: "slow",
}


lab_app = typer.Typer(
    name="lab",
    help="A local fleet of SSH + Docker hosts in containers, with an inventory for it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_console = Console()
_errors = Console(stderr=True)


def _lab(ctx: typer.Context) -> Lab:
    options = ctx.obj if isinstance(ctx.obj, dict) else {}
    root = options.get("lab_root")
    return Lab(Path(root) if root else Path.cwd(), project=options.get("project", DEFAULT_PROJECT))


def _fail(exc: LabError) -> typer.Exit:
    """One line on stderr; exit 2 for bad input (unknown host, another lab's project)."""
    _errors.print(f"lab: {exc}", style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(exc.exit_code)


RootOption = Annotated[
    Path | None,
    typer.Option("--root", help="Directory holding .lab/ and inventory/ (default: working dir)."),
]
ProjectOption = Annotated[
    str,
    typer.Option(
        "--project",
        envvar="MINIDOCK_LAB_PROJECT",
        help="Compose project name (default: $MINIDOCK_LAB_PROJECT, else minidock-lab).",
    ),
]
HostsOption = Annotated[int, typer.Option("--hosts", min=1, max=20, help="How many hosts.")]
BastionOption = Annotated[
    bool,
    typer.Option(
        "--bastion",
        help="Also a bastion, and inventory/lab-bastion.toml reaching the hosts only through it.",
    ),
]
HostArgument = Annotated[str, typer.Argument(help="A lab host, e.g. host2.")]
ModeOption = Annotated[Mode, typer.Option("--mode", help="Which fault to make.")]


@lab_app.callback()
def _lab_options(
    ctx: typer.Context, root: RootOption = None, project: ProjectOption = DEFAULT_PROJECT
) -> None:
    options = ctx.obj if isinstance(ctx.obj, dict) else {}
    ctx.obj = {**options, "lab_root": root, "project": project}


ImagesOption = Annotated[
    str,
    typer.Option(
        "--images",
        help=f"Image sets to build and load into every host: all, or some of "
        f"{','.join(SET_NAMES)} (comma-separated).",
    ),
]
KindsOption = Annotated[
    str,
    typer.Option(
        "--kinds",
        help=f"Each host's kind, in host order (comma-separated; the rest are bookworm): "
        f"{','.join(KIND_NAMES)}.",
    ),
]
SetsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[IMAGE_SETS]...",
        help=f"Image sets: all (the default), or some of {', '.join(SET_NAMES)}.",
        show_default=False,
    ),
]
OnHostsOption = Annotated[
    list[str] | None, typer.Option("--host", help="Only this host (repeatable; default: all).")
]


def _sets(words: list[str] | None, option: str) -> tuple[str, ...]:
    return parse_sets(",".join(words or ["all"]), option=option)


@lab_app.command("up")
def up_command(
    ctx: typer.Context,
    hosts: HostsOption = 3,
    bastion: BastionOption = False,
    image_sets: ImagesOption = "all",
    kinds: KindsOption = "",
) -> None:
    """Build the images if needed, start host1..hostN, write inventory/lab.toml."""
    lab = _lab(ctx)
    try:
        sets = parse_sets(image_sets, option="--images")
        each = parse_kinds(kinds, hosts) if kinds else ()
        lab.up(hosts, bastion=bastion, sets=sets, kinds=each)
    except LabError as exc:
        raise _fail(exc) from exc
    for note in lab.notes:
        _errors.print(f"lab: {note}", markup=False)
    rel = os.path.relpath(lab.inventory_path)
    steps = ", ".join(
        f"{step} {lab.timings[step]:.1f}s"
        for step in ("host image", "compose up", "load images", "provision")
        if step in lab.timings
    )
    _console.print(
        f"lab up: {hosts} hosts in {lab.timings['up']:.1f}s ({steps}); inventory: {rel}",
        markup=False,
    )
    if bastion:
        through = os.path.relpath(lab.bastion_inventory_path)
        config = os.path.relpath(lab.ssh_config_path)
        _console.print(f"through the bastion: inventory {through}, ssh config {config}")


@lab_app.command("build")
def build_command(sets: SetsArgument = None) -> None:
    """Build these image sets where missing, side by side (no lab needed): what `up` would
    build, ahead of it. `host` names the host image (`all`: it and every set)."""
    try:
        built = build_named(sets or [])
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(built_line(built), markup=False)


@lab_app.command("load")
def load_command(ctx: typer.Context, sets: SetsArgument = None, host: OnHostsOption = None) -> None:
    """Build these image sets where missing and load them into the running hosts (all, or
    each --host): what a lab made with `up --images` lacks."""
    lab = _lab(ctx)
    try:
        loaded = lab.load(_sets(sets, "IMAGE_SETS"), host)
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(f"lab load: {', '.join(loaded) or 'every host had them'}", markup=False)


@lab_app.command("down")
def down_command(ctx: typer.Context) -> None:
    """Remove the lab's hosts, their volumes and inventory/lab.toml (this lab's only)."""
    try:
        _lab(ctx).down()
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print("lab down")


JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document (docs/lab.md).")]


@lab_app.command("status")
def status_command(ctx: typer.Context, json_output: JsonOption = False) -> None:
    """Each host: container state, its loopback ports (SSH, HTTP, HTTPS), its private
    address, and whether SSH + `docker ps` work."""
    lab = _lab(ctx)
    try:
        rows = lab.status()
    except LabError as exc:
        raise _fail(exc) from exc
    if json_output:
        acme = lab.acme()
        document = {
            "hosts": [row.document() for row in rows],
            "acme": acme.document() if acme is not None else None,
        }
        typer.echo(json.dumps(document, indent=2))
        raise typer.Exit(0 if rows else 1)
    if not rows:
        _console.print(f"no lab here (run `{lab.command('up')}`)", markup=False)
        raise typer.Exit(1)
    table = Table(title=f"lab {lab.project} ({os.path.relpath(lab.inventory_path)})")
    columns = ("host", "container", "ssh port", "http", "https", "private address")
    for column in (*columns, "ssh", "docker ps", "running", "error"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row.name,
            row.state,
            str(row.port),
            str(row.http_port or "-"),
            str(row.https_port or "-"),
            row.private_address or "-",
            "yes" if row.ssh else "[red]no[/red]",
            "yes" if row.docker else "[red]no[/red]",
            "-" if row.running is None else str(row.running),
            row.error,
        )
    _console.print(table)


@lab_app.command("kill")
def kill_command(ctx: typer.Context, host: HostArgument, mode: ModeOption = Mode.STOP) -> None:
    """Make a fault: stop (host off), pause (hung), sshd, dockerd (daemon dead), partition
    (port 22 dropped; tasks keep running), disk (full: no new container can be created),
    slow (sends at 16 Mbit/s)."""
    try:
        _lab(ctx).kill(host, _MODES[mode])
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(f"{host}: {mode.value}")


@lab_app.command("revive")
def revive_command(ctx: typer.Context, host: HostArgument) -> None:
    """End any fault on HOST and wait until it answers SSH and docker again."""
    try:
        _lab(ctx).revive(host)
    except LabError as exc:
        raise _fail(exc) from exc
    _console.print(f"{host}: ready")
