"""Docker commands as pure values, and readers of what they print, one module a duty:

- `minidock.commands.docker`: the docker argv builders of the act path and the operator
  commands (run, create, stop, rm, pull, login, networks, configs, images, logs, exec);
- `minidock.commands.facts`: facts, each probe's argv beside the parser of its output
  (`docker ps` listings and their keys, `docker inspect`, events, the port tables);
- `minidock.commands.errors`: Docker's error words read into named causes;
- `minidock.commands.caddy`, `minidock.commands.haproxy`: the ingress proxy's and the name
  proxies' configs and container argvs (each config one value with its digest);
- `minidock.commands.hostcheck`, `hostprep`, `tarnames`: a host's check and preparation
  scripts, and a volume stream's member names.

Nothing is re-exported here: import each name from the module that defines it. Nothing
here runs or quotes a command; `minidock.ssh` quotes every argv, in one place.
"""
