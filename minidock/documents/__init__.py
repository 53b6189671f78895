"""The documents a command prints, each typed and held by its schema: `status` (the
`status --json` document and its table) and `plan` (the `plan --json` document). They read
a state and a Plan; they decide and do nothing.

Nothing is re-exported here: import each name from the module that defines it.
"""
