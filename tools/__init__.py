"""Project tooling that is not part of the package (import-linter contract types)."""
