"""`minidock` commands for the lab tests without paying the imports each time.

Each `minidock` command spends about half a second of CPU importing MiniDock, asyncssh,
jsonschema and typer before it does anything, and the lab tests run well over a thousand
of them on two cores. A zygote (as Android's, or Ruby's spring) imports all of MiniDock
once; each command is then a fork of it that runs `python -m minidock ARGS` exactly as a
fresh interpreter would from that point: its own process, argv, environment, working
directory and stdin/stdout/stderr (passed over a Unix socket), its exit status or the
signal that killed it. What a fork does not repeat is only the import of modules that
hold no per-run state (a test that runs a command to check what it imports, or how it
starts, runs `sys.executable -m minidock` itself). Children share the zygote's hash seed;
`random` reseeds itself in each.

Run as `python tests/zygote.py SOCKET` by `Zygote`; it exits when its parent does.
"""

from __future__ import annotations

import gc
import importlib
import json
import locale
import os
import pkgutil
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

_MESSAGE = 1 << 20  # a request: argv, cwd and environment as JSON (some kB)


def _preload() -> None:
    """Import every MiniDock module (not `minidock.__main__`, which would run the CLI)."""
    import minidock

    for module in pkgutil.walk_packages(minidock.__path__, "minidock."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)


def _warm() -> None:
    """What each command would build again on first use, built once here: the CLI's click
    command tree (typer builds it from every command's signature at each `app()`, about
    0.12 s) and the state codec's cattrs hooks (about 0.09 s). A fork gets its own copy."""
    import typer.main

    from minidock import cli
    from minidock.store import codec

    codec.warm()
    built, build = typer.main.get_command(cli.app), typer.main.get_command
    typer.main.get_command = lambda app: built if app is cli.app else build(app)


def _serve(path: str) -> None:
    """Fork a child for each request; returns only in a child, ready to run the CLI."""
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's directory
    _preload()
    _warm()
    gc.collect()
    gc.freeze()  # the children's collections skip (and so do not copy) the preloaded heap
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(os.pidfd_open(os.getppid()), selectors.EVENT_READ)  # the test worker
    children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (connection, pid)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, _MESSAGE, 3)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    held = [conn, *(other for other, _ in children.values())]
                    _become_child(json.loads(message), fds, selector, held)
                    return
                for fd in fds:
                    os.close(fd)
                conn.send(f"pid {pid}".encode())
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (conn, pid)
                selector.register(pidfd, selectors.EVENT_READ)
            elif key.fd in children:
                conn, pid = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                conn.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
                conn.close()
            else:  # the test worker is gone
                os._exit(0)


def _become_child(
    request: dict[str, Any],
    fds: list[int],
    selector: selectors.BaseSelector,
    connections: list[socket.socket],
) -> None:
    """The forked child takes the request's process state: no fd of the zygote's kept
    (its listener, the pidfds it waits on, every request's connection: the zygote answers
    on them)."""
    for conn in connections:
        conn.close()
    for key in list(selector.get_map().values()):
        fileobj = key.fileobj
        if isinstance(fileobj, int):
            os.close(fileobj)
        else:
            fileobj.close()  # type: ignore[union-attr]
    selector.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    sys.path[0] = request["cwd"]
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["minidock", *request["argv"]]


class Zygote:
    """The test worker's side: starts the zygote on first use, runs commands through it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._path = ""

    def _started(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._path = os.path.join(tempfile.mkdtemp(prefix="minidock-zygote-"), "sock")
                self._proc = subprocess.Popen(
                    [sys.executable, __file__, self._path],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
                deadline = time.monotonic() + 60
                while not os.path.exists(self._path):
                    if self._proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the minidock zygote did not start ({self._path})")
                    time.sleep(0.02)
            return self._path

    def run(
        self, args: list[str], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """`python -m minidock ARGS` as `subprocess.run(..., capture_output=True, text=True,
        timeout=timeout)` would run it (killed and TimeoutExpired past the timeout)."""
        argv = [sys.executable, "-m", "minidock", *args]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(self._started())
            request = {"argv": args, "env": env, "cwd": os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode()], [stdin, out_w, err_w])
            for fd in (stdin, out_w, err_w):
                os.close(fd)
            pid = int(conn.recv(64).split()[1])
            try:
                out, err, finished = _read_both(out_r, err_r, time.monotonic() + timeout)
            finally:
                os.close(out_r)
                os.close(err_r)
            if not finished:
                os.kill(pid, signal.SIGKILL)
                conn.recv(64)
                raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err))
            code = int(conn.recv(64).split()[1])
        return subprocess.CompletedProcess(argv, code, _text(out), _text(err))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._path:
            shutil.rmtree(os.path.dirname(self._path), ignore_errors=True)


def _read_both(out_r: int, err_r: int, deadline: float) -> tuple[bytes, bytes, bool]:
    """Both pipes read to their end (the command and whatever it left holding them), or
    until the deadline: (stdout, stderr, ended)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = {out_r, err_r}
    with selectors.DefaultSelector() as selector:
        for fd in open_fds:
            selector.register(fd, selectors.EVENT_READ)
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _ in selector.select(left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
                    open_fds.discard(key.fd)
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), not open_fds


def _text(data: bytes) -> str:
    """As `subprocess` decodes text mode output: locale encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    _serve(sys.argv[1])
    import runpy

    runpy.run_module("minidock", run_name="__main__", alter_sys=True)
