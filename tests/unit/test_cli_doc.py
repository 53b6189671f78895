"""docs/cli.md's examples hold to the code: the `status --json` example validates against
the schema the package ships, and every event kind the code emits is in the event table."""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from minidock.documents.status import status_schema
from tests.source import parsed

ROOT = Path(__file__).parents[2]
CLI_MD = ROOT / "docs" / "cli.md"


def section(title: str) -> str:
    """The text of docs/cli.md's `## TITLE` section, up to the next `## ` heading."""
    text = CLI_MD.read_text()
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert found is not None, f"docs/cli.md lost its '## {title}' section"
    return found[1]


def status_example() -> Any:
    found = re.search(r"```json\n(.*?)\n```", section("`status --json`"), re.S)
    assert found is not None, "docs/cli.md's `status --json` section lost its json example"
    return json.loads(found[1])


def test_the_status_json_example_passes_the_status_schema() -> None:
    validator = Draft202012Validator(status_schema())
    errors = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in validator.iter_errors(status_example())
    ]
    assert not errors, "docs/cli.md's status --json example:\n" + "\n".join(errors)


KIND = re.compile(r"^[a-z]+(?:-[a-z_]+)*$")
# the modules that write events: the decision core, the act path, the use cases
WRITERS = ("core", "usecases", "act")


def literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and KIND.match(node.value):
        return node.value
    return None


def named_kind(target: ast.AST) -> bool:
    return isinstance(target, ast.Name) and target.id == "kind"


def kinds_in(tree: ast.AST) -> set[str]:
    """The kinds written as literals: `Event(at, "kind", ...)`, `acts.record("kind", ...)`,
    and what is assigned to a name `kind` (alone or in a tuple: `said, kind = ..., "k"`)."""
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "Event" and len(node.args) > 1:
                found.add(literal(node.args[1]))
            elif name == "record" and node.args:
                found.add(literal(node.args[0]))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if named_kind(target):
                    found.add(literal(node.value))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for t, v in zip(target.elts, node.value.elts, strict=False):
                        if named_kind(t):
                            found.add(literal(v))
    return {k for k in found if k}


@functools.cache
def emitted_kinds() -> frozenset[str]:
    """Every event kind the code writes: the literals above, and the machines' tables (the
    hosts' probe table, the rollout's SAYS with each phase `rollout-{phase}` can name, the
    hooks' kinds in the decision)."""
    from minidock.core import decide, hooks, hosts, rollout

    package = ROOT / "minidock"
    kinds: set[str] = set()
    for writer in WRITERS:
        paths = [package / writer] if writer.endswith(".py") else (package / writer).rglob("*.py")
        for path in paths:
            kinds |= kinds_in(parsed(path))
    kinds |= {kind for _, kind in hosts.PROBE_TABLE.values() if kind}
    for given, (kind, _) in rollout.SAYS.items():
        phases = {after for (_, i), after in rollout.TABLE.items() if i is given}
        kinds |= {kind.format(phase=p.value) for p in phases}
    kinds |= set(decide._SAID.values())
    assert hooks.HookAct.LOST in decide._SAID  # the table read above is still the hooks'
    return frozenset(kinds)


def documented_kinds() -> set[str]:
    rows = re.findall(r"^\| (.*?) \|", section("The event log"), re.M)
    return {kind for row in rows for kind in re.findall(r"`([a-z_-]+)`", row)}


def test_the_event_table_names_every_kind_the_code_writes() -> None:
    missing = sorted(emitted_kinds() - documented_kinds())
    assert not missing, f"docs/cli.md's event table lacks {missing}"


def test_the_event_table_names_no_kind_the_code_never_writes() -> None:
    stale = sorted(documented_kinds() - emitted_kinds())
    assert not stale, f"docs/cli.md's event table names kinds no code writes: {stale}"


def schema_keys(node: dict[str, Any], into: set[str]) -> set[str]:
    """Every property name of a JSON Schema, nested objects and array items included."""
    for key, value in node.get("properties", {}).items():
        into.add(key)
        schema_keys(value, into)
        schema_keys(value.get("items", {}), into)
    return into


def test_the_plan_json_fields_are_every_field_of_its_schema() -> None:
    schema = json.loads((ROOT / "minidock" / "schemas" / "plan.schema.json").read_text())
    text = CLI_MD.read_text()
    listed = text[text.index("validated by `minidock/schemas/plan.schema.json`") :]
    listed = listed[: listed.index("\n\n")]
    missing = sorted(k for k in schema_keys(schema, set()) if not re.search(rf"\b{k}\b", listed))
    assert not missing, f"docs/cli.md's `plan --json` fields lack {missing}"


def test_the_ps_json_fields_are_every_field_of_a_task_row() -> None:
    from dataclasses import fields

    from minidock.usecases.outcomes import HostProblem, TaskRow

    text = section("Commands")
    listed = text[text.index('`--json` prints `{"tasks": [') :]
    listed = listed[: listed.index("\n\n")]
    named = set(re.findall(r'"([a-z_]+)"', listed))
    wanted = {f.name for f in fields(TaskRow)} | {f.name for f in fields(HostProblem)}
    assert wanted | {"tasks", "unreachable"} == named


def hosts_check_example() -> Any:
    text = CLI_MD.read_text()
    start = text.index("### `minidock hosts check")
    found = re.search(r"```json\n(.*?)\n```", text[start:], re.S)
    assert found is not None, "docs/cli.md's hosts check section lost its json example"
    return json.loads(found[1])


def test_the_hosts_check_json_example_has_the_documents_fields() -> None:
    from minidock.commands.hostcheck import Check
    from minidock.usecases.hostcheck import HostReport, HostsCheckOutcome

    example = hosts_check_example()
    made = HostsCheckOutcome("i.toml", (HostReport("h", (Check("ssh", True, "x"),)),)).document()
    assert set(example) == set(made)
    assert set(example["hosts"][0]) == set(made["hosts"][0])  # type: ignore[index]
    for check in example["hosts"][0]["checks"]:
        assert set(check) == set(made["hosts"][0]["checks"][0])  # type: ignore[index]
    names = {c["check"] for c in example["hosts"][0]["checks"]}
    table = section("Commands")
    assert all(f"| `{name}` |" in table for name in names)
