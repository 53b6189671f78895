"""A Compose file parsed as Compose reads it, with the line of every key and list item.

PyYAML's safe loader (anchors, aliases, `<<` merge keys) with YAML 1.2's core schema for
plain scalars, as Compose's Go YAML library reads them: `yes`, `no`, `on`, `off` are strings
(`restart: no`), `8080:80` is a string (YAML 1.1 made it a base-60 integer), dates are
strings, and `0440` is octal (288) as Go's YAML still reads it. `!reset` leaves its key
out and `!override` is its value, as compose-go reads them in one file. Mappings load as
`YDict` and sequences as `YList`, which remember the 1-based line of each key and item, so
an error can name the line it is about.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["Part", "YAMLProblem", "YDict", "YList", "line_of", "parse", "render"]

Part = str | int


class YAMLProblem(Exception):
    """The text is not a YAML mapping Compose could read; `line` 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class YDict(dict[Any, Any]):
    """A YAML mapping; `lines[key]` is the line its key is written on."""

    lines: dict[Any, int]

    def __init__(self) -> None:
        super().__init__()
        self.lines = {}


class YList(list[Any]):
    """A YAML sequence; `lines[i]` is the line item i starts on."""

    lines: list[int]

    def __init__(self) -> None:
        super().__init__()
        self.lines = []


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema booleans, integers and floats."""


_DROPPED = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_DROPPED.add("tag:yaml.org,2002:timestamp")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer as Go's YAML reads it: `0o440` and `0x1f`, and YAML 1.1's `0440` still
    octal (yaml.v3 keeps it "for compatibility"), so `mode: 0440` is 288 as in Compose."""
    text = str(loader.construct_scalar(node))
    if text.startswith("0o"):
        return int(text[2:], 8)
    if _OCTAL_11.fullmatch(text):
        return int(text, 8)
    return int(text, 0) if text.startswith("0x") else int(text, 10)


_OCTAL_11 = re.compile(r"[-+]?0[0-7]+")


class _Reset:
    """A value tagged `!reset`: its key (or item) is left out, as compose-go leaves it out
    (with a merge key, the merged-in value too); `!override` is the value as it is, since
    one file has nothing else to merge it with."""


_RESET = _Reset()


def _construct_reset(loader: yaml.SafeLoader, node: yaml.Node) -> _Reset:
    return _RESET


def _construct_override(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return _construct_map(loader, node)
    if isinstance(node, yaml.SequenceNode):
        return _construct_seq(loader, node)
    assert isinstance(node, yaml.ScalarNode)
    resolved = loader.resolve(yaml.ScalarNode, node.value, (True, False))  # type: ignore[no-untyped-call]
    plain = yaml.ScalarNode(str(resolved), node.value, node.start_mark, node.end_mark, node.style)
    return loader.construct_object(plain, deep=True)


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> YDict:
    own: dict[Any, int] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = key_node.value
            if key in own:
                raise YAMLProblem(
                    f"duplicate key {key!r} (also on line {own[key]})", key_node.start_mark.line + 1
                )
            own[key] = key_node.start_mark.line + 1
    loader.flatten_mapping(node)
    data = YDict()
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise YAMLProblem("a mapping key must be a plain value", key_node.start_mark.line + 1)
        value = loader.construct_object(value_node, deep=True)
        if value is _RESET:
            data.pop(key, None)
            data.lines.pop(key, None)
            continue
        data[key] = value
        data.lines[key] = key_node.start_mark.line + 1
    return data


def _construct_seq(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> YList:
    data = YList()
    for item in node.value:
        value = loader.construct_object(item, deep=True)
        if value is not _RESET:
            data.append(value)
            data.lines.append(item.start_mark.line + 1)
    return data


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
_Loader.add_constructor("!reset", _construct_reset)
_Loader.add_constructor("!override", _construct_override)


def parse(text: str) -> YDict:
    """The document in `text`, a mapping; YAMLProblem names what is wrong, and where."""
    try:
        doc = _load_bounded(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "cannot parse"
        if mark is None:
            raise YAMLProblem(f"invalid YAML: {problem}") from None
        raise YAMLProblem(
            f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {problem}",
            mark.line + 1,
        ) from None
    except yaml.YAMLError as exc:
        raise YAMLProblem(f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise YAMLProblem("invalid YAML: nested too deeply") from None
    except ValueError:  # an integer past Python's digit limit for int()
        raise YAMLProblem("invalid YAML: a number too long to read") from None
    if not isinstance(doc, YDict):
        raise YAMLProblem("a Compose file is a mapping with a services key")
    return doc


MAX_VALUES = 100_000  # values of the file with every alias expanded: real files have thousands


def _load_bounded(text: str) -> Any:
    """The document, refused before it is built when its aliases expand it past
    MAX_VALUES values (a few hundred bytes of nested aliases can name billions; compose-go
    refuses them as "excessive aliasing"): PyYAML shares an alias's node, the walks after
    it (interpolation, translation) would not."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded(node, {}) > MAX_VALUES:
            raise YAMLProblem(
                f"excessive aliasing: with its aliases expanded the file has more than "
                f"{MAX_VALUES:,} values; write the repeated parts out or alias less"
            )
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded(node: yaml.Node, seen: dict[int, int]) -> int:
    """How many values `node` is with every alias expanded (each node counted once: `seen`)."""
    known = seen.get(id(node))
    if known is not None:
        return known
    seen[id(node)] = MAX_VALUES + 1  # a node that contains itself expands without end
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            total += _expanded(item, seen)
            if total > MAX_VALUES:
                break
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            total += _expanded(key, seen) + _expanded(value, seen)
            if total > MAX_VALUES:
                break
    seen[id(node)] = total
    return total


def line_of(doc: Any, parts: Sequence[Part]) -> int | None:
    """The line of the deepest key or item of `parts` that `doc` has."""
    line: int | None = None
    node = doc
    for part in parts:
        if isinstance(node, YDict) and part in node:
            line = node.lines.get(part, line)
            node = node[part]
        elif isinstance(node, YList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lines[part]
            node = node[part]
        else:
            break
    return line


def render(parts: Sequence[Part]) -> str:
    """A key path as Compose users read it: services.web.deploy.replicas, ports[1]."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if re.fullmatch(r"[A-Za-z0-9_-]+", part) else repr(part)
            out += f".{key}" if out else key
    return out
