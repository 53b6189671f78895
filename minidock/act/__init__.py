"""The act path: a pass's Plan carried out on the hosts over SSH, deciding nothing.

- `carry`: the one entry (`carry_out`), walking the Plan's fields in their order;
- `acts`: the task verbs (start, stop, remove) and what a start needs on its host;
- `configs`, `push`, `build`: a task's files, images sent from the controller, images built;
- `ingress`, `names`: the ingress and name proxies' configs loaded or their proxies started;
- `certify`, `acme`: certificates ordered and collected, the controller as an ACME client;
- `jobs`: one-off tasks (hooks, scheduled and manual runs);
- `relocate`, `volumecopy`, `backups`: volumes moved, restored, copied and backed up.

Each act's result is an outcome the core folds into the state; nothing here writes state.
Nothing is re-exported here: import each name from the module that defines it.
"""
