"""Who owns a lab: the rule every `lab` command checks before it touches anything.

Two things can belong to another lab. A **compose project** belongs to the lab directory
its containers were created from (compose labels each container with its working
directory, which is a lab's `.lab/`); a command refuses a project whose containers come
from another directory, since container names (`<project>-hostN`) would reach that lab's
hosts, unless none of those containers runs: then the other lab is gone (a reboot, an
engine started on a copied disk) and `up` removes its leftovers. The **files** under a
root (`inventory/lab.toml`, `.lab/known_hosts`, `.lab/lab.json`, ...) belong to the
project `.lab/lab.json` names; a command for another project never deletes them, and
`up` never overwrites them while that lab still runs.
The decision is pure (`refusal`); `minidock.lab.fleet.Lab.check_owner` gathers the facts.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from minidock.lab.directory import lab_command

__all__ = ["Claim", "Verb", "refusal", "takeover"]

Verb = Literal["up", "down", "status", "kill", "revive", "load"]


@dataclass(frozen=True)
class Claim:
    """What a command for `project` on the lab at `root` finds on this machine."""

    root: Path
    project: str
    project_dirs: Collection[str]  # compose working dirs of the project's containers
    recorded: str | None  # the project root/.lab/lab.json names; None: no lab files here
    recorded_runs: bool = False  # that recorded project still has containers from root
    live_dirs: Collection[str] = ()  # those of project_dirs with a running (or paused) container

    @property
    def lab_dir(self) -> str:
        return str(self.root / ".lab")

    def foreign_dirs(self) -> list[str]:
        """Working dirs of the project's containers that are not this lab's."""
        return sorted(set(self.project_dirs) - {self.lab_dir})

    def foreign_lab_runs(self) -> bool:
        """A container of the project from another lab directory runs (or is paused)."""
        return bool(set(self.foreign_dirs()) & set(self.live_dirs))

    def owns_containers(self) -> bool:
        """Some of the project's containers exist and all come from this lab directory."""
        return bool(self.project_dirs) and not self.foreign_dirs()

    def owns_files(self) -> bool:
        """The files under root are this project's: lab.json names it, or there is no
        lab.json and the project's containers come from this root."""
        if self.foreign_dirs():
            return False
        return self.recorded == self.project or (self.recorded is None and self.owns_containers())


def _root_of(directory: str) -> Path:
    """The lab root whose compose working dir is `directory` (root/.lab)."""
    path = Path(directory)
    return path.parent if path.name == ".lab" else path


def _roots(directories: Collection[str]) -> str:
    return ", ".join(str(_root_of(d)) for d in directories)


def takeover(claim: Claim) -> str | None:
    """What `up` says when it removes the project's containers that another lab directory
    left stopped (refusal() let `up` pass them: none runs), or None when there are none."""
    foreign = claim.foreign_dirs()
    if not foreign:
        return None
    return (
        f"removed compose project {claim.project!r}'s stopped containers, left by the lab"
        f" in {_roots(foreign)} (none of them ran)"
    )


def refusal(claim: Claim, verb: Verb, args: str = "", cwd: Path | None = None) -> str | None:
    """Why `minidock lab VERB ARGS` must not act on this lab (one line), or None when it
    may. A command the line names reaches only a lab this root owns: a lab another
    checkout owns is named as such, with nothing to operate it from here."""
    command = f"{verb} {args}".strip()
    foreign = claim.foreign_dirs()
    if foreign and verb == "up" and not claim.foreign_lab_runs():
        foreign = []  # stopped leftovers (a reboot, a copied disk): up removes them
    if foreign:
        head = (
            f"compose project {claim.project!r} belongs to another checkout's lab"
            f" (in {_roots(foreign)}), not to this one ({claim.root})"
        )
        return f"{head}; {_own_lab_hint(claim, verb, command, cwd)}"
    recorded = claim.recorded
    if recorded is None or recorded == claim.project:
        return None
    if verb == "up" and not claim.recorded_runs:
        return None  # the files are left over from a lab that is gone: up may replace them
    if verb == "down" and claim.owns_containers():
        return None  # this root's containers of the project go; the files stay (not its own)
    if verb == "up":
        down = lab_command("down", root=claim.root, project=recorded, cwd=cwd)
        return (
            f"{claim.root} holds the lab of compose project {recorded!r}, still running:"
            f" `{down}` first, or use another --root"
        )
    other = lab_command(command, root=claim.root, project=recorded, cwd=cwd)
    return (
        f"{claim.root} holds the lab of compose project {recorded!r}, not"
        f" {claim.project!r}: use `{other}`"
    )


def _own_lab_hint(claim: Claim, verb: Verb, command: str, cwd: Path | None) -> str:
    """What this root may do instead: its own lab's command (the project its lab.json
    names), or start one under another project name."""
    recorded = claim.recorded
    if recorded is not None and recorded != claim.project and verb != "up":
        own = lab_command(command, root=claim.root, project=recorded, cwd=cwd)
        return f"this checkout's lab is project {recorded!r}: `{own}`"
    start = lab_command("up", root=claim.root, project="NAME", cwd=cwd)
    return f"this checkout's own lab takes another project name: `{start}`"
