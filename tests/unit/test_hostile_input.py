"""Inputs past what a spec can mean: numbers beyond 64 bits, durations and sizes beyond
Docker's limits, NUL bytes, nesting hundreds deep, a secret written where a table belongs.

Each is refused by the command line as any bad input is: exit 2, one line naming the file
and the key, no traceback, no SSH, no state; and no error echoes a value that may be secret.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_cli import CLUSTER, HOST, WEB, in_tmp, invoke, one_line_error, ssh_calls

__all__ = ["in_tmp", "ssh_calls"]  # the fixtures, shared with test_cli

BIG = "9" * 400
TOO_LONG = (
    "invalid duration: too long: at most 2562047h47m16.854s (about 292 years, Docker's limit)"
)
TOO_LARGE = "invalid size: too large: at most 9223372036854775807 bytes (8EiB, Docker's limit)"
INT64 = "must be a 64-bit integer (-9223372036854775808..9223372036854775807)"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("cluster", "inventory", "expected"),
    [
        pytest.param(
            WEB + f"cpus = {BIG}\n", HOST, f"cluster.toml: services.web.cpus: {INT64}", id="cpus"
        ),
        pytest.param(
            WEB, HOST + f"cpus = {BIG}\n", f"inventory.toml: hosts[0].cpus: {INT64}", id="host-cpus"
        ),
        pytest.param(
            WEB + f"replicas = {BIG}\n",
            HOST,
            "cluster.toml: services.web.replicas: must be at most 1000, got an integer beyond "
            "64 bits",  # the schema's maximum (docs/formats.md#at-most-1000-replicas) first
            id="replicas",
        ),
        pytest.param(
            WEB + "a = " + "9" * 5000 + "\n",
            HOST,
            "cluster.toml: invalid TOML: a number too long to read (TOML integers are 64-bit)",
            id="5000-digits",
        ),
        pytest.param(
            WEB + f'restart = {{ max_delay = "{BIG}h" }}\n',
            HOST,
            f"cluster.toml: services.web.restart.max_delay: {TOO_LONG}",
            id="duration-string",
        ),
        pytest.param(
            WEB + "stop_grace_period = 1e300\n",
            HOST,
            f"cluster.toml: services.web.stop_grace_period: {TOO_LONG}",
            id="duration-float",
        ),
        pytest.param(
            WEB + f"health = {{ cmd = ['true'], interval = {BIG} }}\n",
            HOST,
            f"cluster.toml: services.web.health.interval: {TOO_LONG}",
            id="duration-int",
        ),
        pytest.param(
            WEB + 'update = { monitor = "2562047h47m16.855s" }\n',
            HOST,
            f"cluster.toml: services.web.update.monitor: {TOO_LONG}",
            id="duration-past-go",
        ),
        pytest.param(
            WEB,
            HOST + f'connect_timeout = "{BIG}s"\n',
            f"inventory.toml: hosts[0].connect_timeout: {TOO_LONG}",
            id="inventory-duration",
        ),
        pytest.param(
            WEB + f'memory = "{BIG}GiB"\n',
            HOST,
            f"cluster.toml: services.web.memory: {TOO_LARGE}",
            id="size",
        ),
        pytest.param(
            WEB + 'memory = "8388608TiB"\n',
            HOST,
            f"cluster.toml: services.web.memory: {TOO_LARGE}",
            id="size-past-int64",
        ),
        pytest.param(
            'cluster = "prod"\ninventory = "inventory\\u0000.toml"\n',
            HOST,
            "cluster.toml: inventory: must not contain a NUL byte",
            id="nul-inventory-path",
        ),
        pytest.param(
            WEB,
            HOST + 'identity_file = "/tmp/key\\u0000"\n',
            "inventory.toml: hosts[0].identity_file: must not contain a NUL byte",
            id="nul-identity-file",
        ),
        pytest.param(
            WEB + 'secrets = { TOKEN = { file = "/tmp/t\\u0000" } }\n',
            HOST,
            "cluster.toml: services.web.secrets.TOKEN.file: must not contain a NUL byte",
            id="nul-secret-file",
        ),
        pytest.param(
            WEB + "command = " + nested(900) + "\n",
            HOST,
            "cluster.toml: invalid TOML: arrays or tables nested too deeply",
            id="nested-900",
        ),
        pytest.param(
            WEB + "command = " + nested(100) + "\n",
            HOST,
            "cluster.toml: services.web.command[0]: arrays or tables nested too deeply "
            "(at most 32 levels)",
            id="nested-100",
        ),
    ],
)
def test_an_input_past_what_a_spec_can_mean_is_one_line_and_exit_2(
    in_tmp: Path, ssh_calls: list[str], cluster: str, inventory: str, expected: str
) -> None:
    (in_tmp / "cluster.toml").write_text(cluster)
    (in_tmp / "inventory.toml").write_text(inventory)
    for command in ("validate", "plan", "apply"):
        assert one_line_error(invoke(command, "cluster.toml")) == expected
    assert not (in_tmp / ".minidock").exists()
    assert ssh_calls == []


def test_an_inventory_nested_900_deep_is_one_line(in_tmp: Path, ssh_calls: list[str]) -> None:
    (in_tmp / "inventory.toml").write_text(HOST + "labels = " + nested(900) + "\n")
    assert one_line_error(invoke("validate", "inventory.toml")) == (
        "inventory.toml: invalid TOML: arrays or tables nested too deeply"
    )


SECRET = "hunter2-s3cr3t"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            WEB + f'env = "DB_PASSWORD={SECRET}"\n',
            "services.web.env: expected a table, got a string",
            id="env-as-string",
        ),
        pytest.param(
            WEB + f'secrets = "TOKEN={SECRET}"\n',
            "services.web.secrets: expected a table, got a string",
            id="secrets-as-string",
        ),
        pytest.param(
            WEB + f'env = {{ "DB_PASSWORD={SECRET}" = "x" }}\n',
            "services.web.env: invalid environment variable name 'DB_PASSWORD=...': "
            "use letters, digits and '_', not starting with a digit",
            id="env-assignment-as-key",
        ),
        pytest.param(
            WEB + f'env = {{ DB_PASSWORD = ["{SECRET}"] }}\n',
            "services.web.env.DB_PASSWORD: expected a string, got an array (write it in quotes)",
            id="env-value-array",
        ),
        pytest.param(
            CLUSTER + f'services = {{ web = "DB_PASSWORD={SECRET}" }}\n',
            "services.web: expected a table, got a string",
            id="service-as-string",
        ),
        pytest.param(
            CLUSTER
            + f'registries = {{ "r.example" = "{SECRET}" }}\n[services.web]\nimage = "web:5"\n',
            'registries."r.example": expected a table, got a string',
            id="registry-as-string",
        ),
        pytest.param(
            CLUSTER
            + f'[registries."r.example"]\nusername = "u"\npassword = "{SECRET}"\n'
            + '[services.web]\nimage = "web:5"\n',
            'registries."r.example".password: expected a table with one of file = "path", '
            'env = "NAME", command = [...] or age_file = "path"',
            id="registry-password-inline",
        ),
    ],
)
def test_no_error_echoes_a_value_that_may_be_secret(
    in_tmp: Path, ssh_calls: list[str], spec: str, expected: str
) -> None:
    (in_tmp / "cluster.toml").write_text(spec)
    (in_tmp / "inventory.toml").write_text(HOST)
    for command in ("validate", "plan", "apply"):
        result = invoke(command, "cluster.toml")
        assert one_line_error(result) == f"cluster.toml: {expected}"
        assert SECRET not in result.output
