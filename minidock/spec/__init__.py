"""Reading the inventory and cluster files into the model, or one clear error.

Each file goes through three stages, and the first problem found stops it:
TOML parse (with line and column), the JSON Schema shipped in `minidock/schemas/`
(errors mapped to a key path and a human message, in document order), then semantic
checks the schema cannot express (duplicate hosts, unknown or cyclic dependencies,
port ranges, backoff bounds). Every problem is a `SpecError` whose `str()` is one line:
`FILE: KEY.PATH: message`. This package is the file adapter: it reads files, nothing else.

Modules: `errors` (SpecError), `reading` (TOML and JSON Schema), `messages` (their
wording), `inventory` and `cluster` (each file into the model, with its semantic checks).
"""

from minidock.spec.cluster import (
    cluster_document,
    load,
    load_cluster,
    secret_env_warnings,
    topo_order,
)
from minidock.spec.errors import SpecError
from minidock.spec.inventory import load_inventory

__all__ = [
    "SpecError",
    "cluster_document",
    "load",
    "load_cluster",
    "load_inventory",
    "secret_env_warnings",
    "topo_order",
]
