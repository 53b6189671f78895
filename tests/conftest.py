"""Shared pytest setup: options for the lab fleet, and the `integration` marker applied to
everything under tests/integration (those tests need a Docker engine and fail without one;
unit tests never touch the engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION_DIR = Path(__file__).parent / "integration"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("minidock lab")
    group.addoption(
        "--lab-hosts",
        type=int,
        default=4,
        help="hosts in the integration tests' lab fleet (default 4: zones a, a, b, c)",
    )
    group.addoption(
        "--keep-lab",
        action="store_true",
        help="leave the lab fleet running after the session (the next session removes it)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in item.path.parents:
            item.add_marker(pytest.mark.integration)
