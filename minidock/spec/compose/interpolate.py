"""Compose's variable interpolation, as compose-go's `template` package does it.

`$VAR` and `${VAR}` are replaced by the variable's value (unset: empty, with a warning);
`${VAR:-default}` / `${VAR-default}` give the default when VAR is unset or empty / unset;
`${VAR:+alt}` / `${VAR+alt}` give alt when VAR is set and not empty / set;
`${VAR:?message}` / `${VAR?message}` are errors when VAR is unset or empty / unset;
defaults, alternatives and messages are interpolated in turn, so they may nest
(`${A:-${B}}`); `$$` is a literal `$`. Names are letters, digits and `_`, not starting with
a digit. A `$` before anything else is kept as it is, except `${` with no valid name after
it, which is an error. Only values are interpolated, never keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["InterpolationError", "Substitution", "substitute"]

_PATTERN = re.compile(
    r"\$(?:(?P<escaped>\$)|(?P<named>[_a-z][_a-z0-9]*)"
    r"|\{(?:(?P<braced>[_a-z][_a-z0-9]*(?::?[-+?](.*))?)\}|(?P<invalid>)))",
    re.IGNORECASE,
)
_OPERATORS = (":?", "?", ":-", "-", ":+", "+")


class InterpolationError(Exception):
    """A `${VAR:?message}` whose variable is missing, or a malformed `${...}`."""


@dataclass
class Substitution:
    """Interpolation against one environment; `unset` collects the names found unset."""

    lookup: Mapping[str, str]
    unset: list[str] = field(default_factory=list)

    def __call__(self, template: str) -> str:
        return substitute(template, self.lookup, self.unset.append)


def substitute(
    template: str, lookup: Mapping[str, str], on_unset: Callable[[str], None] = lambda _: None
) -> str:
    """`template` with every variable replaced; InterpolationError for `${VAR:?}` and bad
    syntax. `on_unset(name)` is told of each plain `$VAR` / `${VAR}` that has no value."""
    out: list[str] = []
    position = 0
    while True:
        found = _PATTERN.search(template, position)
        if found is None:
            out.append(template[position:])
            return "".join(out)
        out.append(template[position : found.start()])
        text = found.group(0)
        end = _closing_brace(text)
        rest = ""
        if end >= 0:
            text, rest = text[: end + 1], text[end + 1 :]
        value, applied = _replacement(text, lookup, on_unset)
        if applied and rest:
            value += substitute(rest, lookup, on_unset)
        out.append(value)
        position = found.end()


def _closing_brace(text: str) -> int:
    """Index of the `}` that closes the first `{` (compose-go's getFirstBraceClosingIndex)."""
    depth = 0
    i = 0
    while i < len(text):
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        if text[i] == "{":
            depth += 1
            i += 1
        i += 1
    return -1


def _replacement(
    text: str, lookup: Mapping[str, str], on_unset: Callable[[str], None]
) -> tuple[str, bool]:
    """The value one `$...` stands for, and whether a `${...}` operator consumed it."""
    found = _PATTERN.fullmatch(text) or _PATTERN.match(text)
    if found is None or found["invalid"] is not None:
        raise InterpolationError(
            "invalid interpolation format (a '${' without a name and '}'): write $$ for a $"
        )
    if found["escaped"]:
        return "$", True
    name = found["named"] or found["braced"]
    if found["braced"]:
        applied = _operator(found["braced"], lookup, on_unset)
        if applied is not None:
            return applied, True
    if name not in lookup:
        on_unset(name)
    return lookup.get(name, ""), False


def _operator(body: str, lookup: Mapping[str, str], on_unset: Callable[[str], None]) -> str | None:
    """The value of `NAME<op>word`, or None when `body` is a bare name."""
    places = [(body.find(op), op) for op in _OPERATORS if op in body]
    if not places:
        return None
    _, op = min(places, key=lambda p: (p[0], -len(p[1])))
    name, word = body.split(op, 1)
    value = lookup.get(name)
    empty_counts = op.startswith(":")
    missing = value is None or (empty_counts and value == "")
    if op.endswith("?"):
        if missing:
            reason = substitute(word, lookup, on_unset)
            detail = f": {reason}" if reason else ""
            raise InterpolationError(f"required variable {name} is missing a value{detail}")
        return value
    if op.endswith("-"):
        return substitute(word, lookup, on_unset) if missing else value
    return "" if missing else substitute(word, lookup, on_unset)
