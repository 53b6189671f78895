"""`autoscale` in the cluster file and in Compose's x-minidock (issue 48, deliverable 1):
the policy into the model, and every problem one line naming the file, the key and the
fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from minidock.model import Autoscale
from minidock.spec import SpecError, load, load_cluster

HOST = '[[hosts]]\nname = "host1"\naddress = "10.0.0.11"\n'
WEB = (
    'cluster = "prod"\ninventory = "inventory.toml"\n[services.web]\nimage = "web:5"\n'
    'health = { cmd = ["wget", "-qO-", "http://127.0.0.1:8080/"] }\n'
)
ROUTED = WEB + "ingress = [{ port = 8080 }]\n"
POLICY = (
    "autoscale = { min = 2, max = 10, target = { requests_per_task = 50 }, "
    'window = "1m", cooldown = "3m" }\n'
)


def loaded(tmp_path: Path, text: str) -> object:
    (tmp_path / "inventory.toml").write_text(HOST)
    (tmp_path / "cluster.toml").write_text(text)
    return load(tmp_path / "cluster.toml")[0]


def test_the_products_policy_is_read_into_the_model(tmp_path: Path) -> None:
    web = loaded(tmp_path, ROUTED + POLICY).services[0]  # type: ignore[attr-defined]
    assert web.autoscale == Autoscale(
        min=2, max=10, requests_per_task=50.0, p95=None, window=60.0, cooldown=180.0
    )
    assert web.replicas == 2  # no replicas given: the count starts at min


def test_a_latency_target_and_the_defaults(tmp_path: Path) -> None:
    text = ROUTED + 'replicas = 3\nautoscale = { max = 4, target = { p95 = "250ms" } }\n'
    web = loaded(tmp_path, text).services[0]  # type: ignore[attr-defined]
    assert web.autoscale == Autoscale(min=1, max=4, p95=0.25, window=60.0, cooldown=180.0)
    assert web.replicas == 3  # the file's count is the starting count


def test_the_policy_changes_no_task() -> None:
    from tests.sim import svc

    plain = svc(image="web:5", replicas=2)
    scaled = svc(image="web:5", replicas=2, autoscale=Autoscale(min=1, max=5, p95=0.2))
    assert plain.spec_hash() == scaled.spec_hash()


BAD = [
    (
        POLICY.replace("min = 2", "min = 12"),
        "services.web.autoscale.min: min 12 is above max 10: give min <= max",
    ),
    (
        "autoscale = { max = 3, target = {} }\n",
        "services.web.autoscale.target: give exactly one of requests_per_task = N or p95 = '250ms'",
    ),
    (
        'autoscale = { max = 3, target = { requests_per_task = 5, p95 = "1s" } }\n',
        "services.web.autoscale.target: give exactly one of requests_per_task = N or "
        "p95 = '250ms', not both",
    ),
    (
        "autoscale = { max = 3, target = { cpu = 0.8 } }\n",
        "services.web.autoscale.target: unknown key 'cpu' (allowed: requests_per_task, p95)",
    ),
    (
        "autoscale = { max = 3, target = { requests_per_task = 0 } }\n",
        "services.web.autoscale.target.requests_per_task: must be greater than 0, got 0",
    ),
    (
        'autoscale = { max = 3, target = { p95 = "0s" } }\n',
        "services.web.autoscale.target.p95: must be greater than 0, got '0s'",
    ),
    (
        'autoscale = { max = 3, target = { p95 = "fast" } }\n',
        "services.web.autoscale.target.p95: invalid duration 'fast': use a number of seconds "
        "or a string like '500ms', '2s', '1m30s', '1h'",
    ),
    (
        'autoscale = { max = 3, target = { requests_per_task = 5 }, window = "0s" }\n',
        "services.web.autoscale.window: must be greater than 0, got '0s'",
    ),
    (
        'autoscale = { max = 3, target = { requests_per_task = 5 }, cooldown = "soon" }\n',
        "services.web.autoscale.cooldown: invalid duration 'soon': use a number of seconds "
        "or a string like '500ms', '2s', '1m30s', '1h'",
    ),
    (
        "autoscale = { max = 0, target = { requests_per_task = 5 } }\n",
        "services.web.autoscale.max: must be at least 1, got 0",
    ),
    (
        "autoscale = { min = -1, max = 3, target = { requests_per_task = 5 } }\n",
        "services.web.autoscale.min: must be at least 0, got -1",
    ),
    ("autoscale = { min = 1 }\n", "services.web.autoscale: missing required key 'max'"),
    (
        "replicas = 12\n" + POLICY,
        "services.web.replicas: 12 is outside autoscale's 2..10: the starting count must be "
        "within them (or leave replicas out: it starts at min)",
    ),
    (
        'mode = "global"\n' + POLICY,
        "services.web.autoscale: a global service runs one task per host: remove autoscale",
    ),
    (
        'volumes = ["data:/data"]\n' + POLICY,
        "services.web.autoscale: each slot keeps its own named volume data: a count that "
        "follows traffic would leave one behind at every scale-in; remove autoscale",
    ),
]


@pytest.mark.parametrize(
    ("extra", "expected"), BAD, ids=[b[1].split(":")[0] + str(i) for i, b in enumerate(BAD)]
)
def test_a_bad_policy_is_one_line_naming_the_key_and_the_fix(
    tmp_path: Path, extra: str, expected: str
) -> None:
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, ROUTED + extra)
    assert str(err.value) == f"{tmp_path / 'cluster.toml'}: {expected}"


def test_a_service_without_routes_has_nothing_to_follow(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, WEB + POLICY)
    assert str(err.value).endswith(
        "services.web.autoscale: the count follows the requests of the service's routes, "
        "and it has none: add ingress = [...] or remove autoscale"
    )


def test_a_job_has_no_count_to_scale(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, WEB.replace("health = {", 'schedule = "0 3 * * *"\n#') + POLICY)
    assert str(err.value).endswith(
        "services.web.autoscale: a job has no count to scale: each scheduled time starts one run"
    )


def test_uncounted_routes_cannot_be_followed(tmp_path: Path) -> None:
    text = ROUTED + POLICY + "[ingress]\nrequest_metrics = false\n"
    with pytest.raises(SpecError) as err:
        loaded(tmp_path, text)
    assert str(err.value).endswith(
        "services.web.autoscale: the count follows the ingress's request metrics, which "
        "[ingress] request_metrics = false turns off: turn them on or remove autoscale"
    )


COMPOSE = """name: shop
x-minidock: {inventory: inventory.toml}
services:
  web:
    image: web:5
    deploy: {replicas: 3}
    healthcheck: {test: ["CMD", "wget", "-qO-", "http://127.0.0.1:8080/"]}
    x-minidock:
      ingress: [{port: 8080}]
      autoscale: {min: 2, max: 6, target: {p95: 250ms}, cooldown: 5m}
"""


def test_compose_gives_the_policy_in_x_minidock(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(HOST)
    (tmp_path / "compose.yaml").write_text(COMPOSE)
    web = load_cluster(tmp_path / "compose.yaml").services[0]
    assert web.autoscale == Autoscale(min=2, max=6, p95=0.25, window=60.0, cooldown=300.0)
    assert web.replicas == 3  # deploy.replicas: the starting count


def test_a_compose_files_problem_names_its_own_key(tmp_path: Path) -> None:
    (tmp_path / "inventory.toml").write_text(HOST)
    (tmp_path / "compose.yaml").write_text(COMPOSE.replace("min: 2", "min: 7"))
    with pytest.raises(SpecError) as err:
        load_cluster(tmp_path / "compose.yaml")
    assert str(err.value).endswith(
        "compose.yaml: services.web.x-minidock.autoscale.min (line 10): min 7 is above max 6: "
        "give min <= max"
    )
