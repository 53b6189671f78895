"""An allow-list contract type for import-linter: the source modules may import only what
the contract names (itself, the listed modules and their descendants), nothing else.

import-linter's own types forbid a list; a forbid-list misses whatever nobody thought to
forbid. Registered in pyproject.toml (`contract_types`) and run by `lint-imports`.
"""

from __future__ import annotations

from typing import Any, cast

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.imports import Module


def _within(module: str, allowed: list[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


class AllowListContract(Contract):
    """Every direct import of `source_modules` (and their descendants) is of a module in
    `allowed_modules` or a source module's own package, or the contract is broken.

    Direct imports suffice: what an allowed module imports is that module's own contract.
    """

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        # the fields hold parsed values once the contract is made (import-linter's fields)
        sources = [m.name for m in cast("list[Module]", self.source_modules)]
        allowed = [*sources, *cast("list[str]", self.allowed_modules)]
        broken: list[dict[str, Any]] = []
        for source in sources:
            for importer in sorted({source, *graph.find_descendants(source)}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if _within(imported, allowed):
                        continue
                    lines = graph.get_import_details(importer=importer, imported=imported)
                    broken.append(
                        {
                            "importer": importer,
                            "imported": imported,
                            "lines": [d["line_number"] for d in lines],
                        }
                    )
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for found in check.metadata["broken"]:
            where = ", ".join(f"l.{n}" for n in found["lines"])
            output.print_error(
                f"{found['importer']} imports {found['imported']} ({where}): not allowed",
                bold=False,
            )
            output.new_line()
