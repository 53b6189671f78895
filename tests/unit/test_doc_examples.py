"""Every example in the docs validates as written (issue 45): each ```toml block of the
README and docs/*.md is loaded by the real loaders, an inventory example as an
inventory, any other as a cluster spec, and each ```yaml block with `services:` as a
Compose file (with an inventory beside it, and the files it binds made). A fragment (a
service's keys without its image, a table of one key) is completed only with what it
leaves out: a cluster name, an inventory, an image for each service it names, the files
and the secret sources it reads (made in a temporary directory: a secret file, a command
on PATH, a real age file). A block marked `<!-- not-validated: why -->` on the line
before it is skipped, with the reason in the doc; so is one marked `<!-- tutorial:
file|append ... -->`: tests/integration/test_tutorial.py applies those, joined as the
tutorial says, on the lab.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml

from minidock.spec.cluster import load
from minidock.spec.errors import SpecError
from minidock.spec.inventory import load_inventory
from tests.tlsfiles import PrivateCA

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```(toml|yaml)\n(.*?)^\1```", re.M | re.S)
SKIP = re.compile(r"<!-- (not-validated: .+|tutorial: (file|append) .+) -->\s*$")
INVENTORY_TABLES = ("defaults", "hosts", "backup", "settings")
INVENTORY = "".join(f'[[hosts]]\nname = "host{n}"\naddress = "127.0.0.{n}"\n' for n in (1, 2, 3))


@dataclass(frozen=True)
class Example:
    doc: Path
    line: int
    lang: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def examples() -> Iterator[Example]:
    for doc in DOCS:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if SKIP.search(before):
                continue
            indent = len(m.group(1))
            body = "".join(line[indent:] + "\n" for line in m.group(3).splitlines())
            if m.group(2) == "yaml" and not re.search(r"^services:", body, re.M):
                continue  # Prometheus' files, not Compose
            yield Example(doc, text[: m.start()].count("\n") + 1, m.group(2), body)


ALL = list(examples())


def test_the_docs_have_examples() -> None:
    assert len(ALL) > 30


@pytest.mark.parametrize("example", ALL, ids=[e.name for e in ALL])
def test_each_example_validates_as_written(
    example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a block that is not YAML (a Compose file) or TOML fails here
    doc = yaml.safe_load(example.text) if example.lang == "yaml" else tomllib.loads(example.text)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "etc"
    work.mkdir()
    _provide(doc, work, tmp_path, monkeypatch)
    try:
        if example.lang == "yaml":
            inventory = work / doc.get("x-minidock", {}).get("inventory", "inventory.toml")
            inventory.parent.mkdir(parents=True, exist_ok=True)
            inventory.write_text(INVENTORY)
            path = work / "compose.yaml"
            path.write_text(example.text)
            load(path, inventory)
            return
        if set(doc) <= set(INVENTORY_TABLES):
            path = work / "inventory.toml"
            path.write_text(example.text if "hosts" in doc else example.text + "\n" + INVENTORY)
            load_inventory(path)
            return
        spec = _completed(doc)
        inventory = (work / spec["inventory"]).resolve()
        inventory.parent.mkdir(parents=True, exist_ok=True)
        inventory.write_text(INVENTORY)
        path = work / "cluster.toml"
        path.write_text(tomli_w.dumps(spec))
        load(path)
    except SpecError as exc:
        pytest.fail(f"{example.name}: {exc}", pytrace=False)


def _completed(doc: dict[str, Any]) -> dict[str, Any]:
    """The fragment with what it leaves out: a cluster, an inventory, images, and for a
    routed service shown without them, the health check that says it listens."""
    spec = {"cluster": "docs", "inventory": "inventory.toml", **doc}
    services = spec.get("services", {})
    for svc in services.values():
        svc.setdefault("image", "minidock-lab/web:5")
        routes = svc.get("ingress", [])
        for route in [routes] if isinstance(routes, dict) else routes:
            if "health" not in svc and "ports" not in svc and "port" in route:
                url = f"http://127.0.0.1:{route['port']}/"
                svc["health"] = {"cmd": ["wget", "-qO-", url]}
    return spec


def _provide(doc: Any, work: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make what the example reads: each `file` (0600), each `dir`, each `{ env }`, each
    `{ command }` program (a script on PATH printing a value) and each age file (a real
    one, with every key the example asks of it, for its identity)."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ages: dict[str, tuple[str, set[str]]] = {}
    ca = PrivateCA()
    chain, key_pem = ca.leaf("app.example.com")
    contents = {"ca_root": ca.root_pem, "cert": chain, "key": key_pem}
    for parent, node in _tables(doc, ""):
        if isinstance(node.get("ssh_config"), str) and node["ssh_config"] != "none":
            _private(Path(node["ssh_config"].replace("~", str(root / "home"), 1)), "")
        if isinstance(node.get("file"), str):
            _private(work / node["file"], contents.get(parent, "a value\n"))
        if isinstance(node.get("dir"), str):
            (work / node["dir"]).mkdir(parents=True, exist_ok=True)
        if isinstance(node.get("env"), str):
            monkeypatch.setenv(node["env"], "a value")
        command = node.get("command")
        if isinstance(command, list) and command and "/" not in command[0]:
            script = bin_dir / command[0]
            script.write_text("#!/bin/sh\necho a-value\n")
            script.chmod(script.stat().st_mode | stat.S_IXUSR)
        if isinstance(node.get("age_file"), str):
            identity = node.get("identity", "~/.config/age/key.txt")
            _, keys = ages.setdefault(node["age_file"], (identity, set()))
            keys.add(node.get("key", ""))
    for svc in (doc.get("services") or {}).values():  # Compose: bind mounts beside the file
        for mount in svc.get("volumes", []) if isinstance(svc, dict) else []:
            source = mount.split(":")[0] if isinstance(mount, str) else ""
            if source.startswith("./"):
                if "." in Path(source).name:
                    _private(work / source, "a file\n")
                else:
                    (work / source).mkdir(parents=True, exist_ok=True)
    for age_file, (identity, keys) in ages.items():
        key = Path(identity.replace("~", str(root / "home"), 1))
        if not key.is_absolute():
            key = work / key
        key.parent.mkdir(parents=True, exist_ok=True)
        if not key.exists():
            subprocess.run(["age-keygen", "-o", str(key)], check=True, capture_output=True)
        public = subprocess.run(
            ["age-keygen", "-y", str(key)], check=True, capture_output=True, text=True
        ).stdout.strip()
        target = work / age_file
        target.parent.mkdir(parents=True, exist_ok=True)
        dotenv = "".join(f"{k}=a-value\n" for k in sorted(keys) if k)
        subprocess.run(
            ["age", "-r", public, "-o", str(target)], input=dotenv, check=True, text=True
        )


def _tables(node: Any, key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every table of `node` with the key it is the value of."""
    if isinstance(node, dict):
        yield key, node
        for k, value in node.items():
            yield from _tables(value, k)
    elif isinstance(node, list):
        for value in node:
            yield from _tables(value, key)


def _private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text)
        path.chmod(0o600)
