"""`python -m minidock`: the same as the `minidock` command."""

from minidock.cli import main

main()
