"""A pre-imported ``etkit`` for the docs examples: each ``etkit`` command is a fork of one process that has
imported etkit and its dependencies once, instead of a new interpreter that imports them again (0.6-1 s of
CPU per command, ~100 commands in the docs).

The command line the examples call is :data:`CLIENT`, a small script run by ``python -I -S`` (~20 ms): it
connects to the server's Unix socket and hands it its argv, working folder, environment and its stdin, stdout
and stderr (the descriptors themselves, ``SCM_RIGHTS``), then waits and exits as the command did (its exit
status, or the signal that ended it; a signal the client gets is passed on to the command). So the shell
around it is unchanged: pipes, redirections, ``$?``, ``VAR=x etkit ...``.

On the server, each request gets a handler (a fork) that forks the command's process and reports how it
ended. The command's process is set up as ``python -m etkit ARGS`` would be: the client's descriptors as 0, 1
and 2, its folder, its environment, ``sys.path[0]`` the folder, its own process group, and ``etkit.__main__``
run as ``__main__`` (``runpy``), so that it ends as the program does (``sys.exit`` through the interpreter's
own exit: threads joined, ``atexit``, streams flushed; or ``os._exit``).

The server imports nothing that starts a thread or PyTorch (it checks both before it serves): a fork of it
is then what a fresh ``python -m etkit`` is after its imports. Commands that start PyTorch ranks import torch
in their own process, as a real one does.

``python -m tests.docs.zygote SOCKET PID`` serves until a SIGTERM (it then waits for the commands still
running) or until process PID is gone; the docs test starts it once per session.
"""

from __future__ import annotations

import array
import contextlib
import gc
import json
import os
import signal
import socket
import sys
import threading

#: The ``etkit`` and ``python`` of the examples' PATH (``python SCRIPT ARGS`` runs the script in a fork too);
#: ``{python}`` and ``{socket}`` are filled in. Without the server (an environment variable
#: ``ETKIT_EXAMPLE_REAL`` set, or no socket), or for ``python -c``/``-m``/no script, it runs the real program.
CLIENT = r'''#!{python} -IS
import array, json, os, signal, socket, sys
PATH = {socket!r}
PROGRAM = os.path.basename(sys.argv[0])  # "etkit", or "python" (a script: python SCRIPT ARGS)
def real():
    os.environ.pop("ETKIT_EXAMPLE_REAL", None)
    os.execv({python!r}, [{python!r}, *(["-m", "etkit"] if PROGRAM == "etkit" else []), *sys.argv[1:]])
if os.environ.get("ETKIT_EXAMPLE_REAL") or (PROGRAM == "python" and not sys.argv[1:2]) or (
        PROGRAM == "python" and sys.argv[1].startswith("-")):  # python -c/-m/-: the real interpreter
    real()
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(PATH)
except OSError:
    real()
request = json.dumps({{"program": PROGRAM, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
conn.sendmsg([len(request).to_bytes(4, "big"), request],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
reply = conn.makefile("rb")
pid = int(reply.readline().split()[1])
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except OSError:
        pass
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, forward)
line = reply.readline().split()
if not line:
    sys.exit(255)
if line[0] == b"signal":
    signal.signal(int(line[1]), signal.SIG_DFL)
    os.kill(os.getpid(), int(line[1]))
os._exit(int(line[1]))
'''

#: Modules the server imports before it serves: etkit's (every verb's parser, the library) and what they use.
PRELOAD = ("numpy", "orjson", "rich.console", "rich.progress", "rich.table")


#: Modules a fork of the server must import itself: importing them starts threads or takes seconds, and a
#: fresh ``etkit`` imports them only for the verbs that need them.
LATE = ("torch", "torchgen", "dask", "distributed")


class _Late:
    """A meta-path finder that refuses the :data:`LATE` modules while the server preloads, noting each refusal."""

    def __init__(self) -> None:
        self.refused = 0

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] in LATE:
            self.refused += 1
            raise ImportError(f"{name} is imported late (tests/docs/zygote.py)")


def preload() -> None:
    """Import etkit's command line (every verb) and every module of the library that imports none of the
    :data:`LATE` ones; a module that tried (even one that caught the ImportError) is forgotten again, so a
    command imports it afresh, as a new process does."""
    import importlib

    late = _Late()
    sys.meta_path.insert(0, late)
    try:
        for name in (*PRELOAD, "etkit.cli.main", *_modules()):
            before, refused = set(sys.modules), late.refused
            try:
                importlib.import_module(name)
            except ImportError:
                pass
            if late.refused != refused:  # etkit's modules are forgotten (third-party ones may hold C state)
                for gone in set(sys.modules) - before:
                    if gone.split(".")[0] == "etkit":
                        _forget(gone)
    finally:
        sys.meta_path.remove(late)
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in LATE)
    if heavy or threading.active_count() != 1:
        raise RuntimeError(f"the docs' etkit server imported {heavy[:3]} or started threads "
                           f"({threading.enumerate()}): a fork of it would not be a fresh etkit")


def _modules() -> list[str]:
    """Every module of the etkit package, by its file (listing them imports nothing)."""
    import etkit

    root = os.path.dirname(etkit.__file__)
    names = []
    for folder, _dirs, files in sorted(os.walk(root)):
        package = "etkit" if folder == root else "etkit." + os.path.relpath(folder, root).replace(os.sep, ".")
        names += [package if f == "__init__.py" else f"{package}.{f[:-3]}" for f in sorted(files)
                  if f.endswith(".py") and f != "__main__.py"]
    return names


def _forget(name: str) -> None:
    module = sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if module is not None and parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
        delattr(sys.modules[parent], child)


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    head, ancillary, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    size = int.from_bytes(head, "big")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise EOFError("the client went away")
        body += chunk
    return json.loads(body), list(fds)


class _Stop(Exception):
    pass


def _stop(_signum: int, _frame: object) -> None:
    raise _Stop


def serve(path: str, parent: int) -> dict:
    """Serve requests on ``path`` while process ``parent`` lives; returns only in a command's process, with
    its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the socket appears once it accepts
    gc.freeze()  # a fork's collections then leave the preloaded objects alone (no copy-on-write of them all)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, _stop)
    listener.settimeout(5)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone: so is the server
                os._exit(0)
            continue
        except _Stop:  # a SIGTERM: wait for the commands still running (their CPU is counted), then end
            listener.close()
            with contextlib.suppress(ChildProcessError):
                while True:
                    os.wait()
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a handler or command ends by a SIGTERM as usual
        if os.fork() == 0:  # the request's handler
            listener.close()
            request, fds = _recv_request(conn)
            pid = os.fork()
            if pid == 0:  # the command
                conn.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            conn.sendall(f"pid {pid}\n".encode())
            _, status, usage = os.wait4(pid, 0)
            how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            conn.sendall(f"{how} {usage.ru_utime + usage.ru_stime:.3f}\n".encode())  # and the CPU it took
            os._exit(0)
        signal.signal(signal.SIGTERM, _stop)
        conn.close()
        while True:  # reap finished handlers
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def run_command(request: dict) -> None:
    """Become ``python -m etkit ARGV`` (or ``python SCRIPT ARGS``) in the request's folder and environment
    (does not return)."""
    import runpy

    os.setpgid(0, 0)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request["program"] == "python":  # python SCRIPT ARGS
        sys.argv = list(request["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        sys.path[0] = os.getcwd()
        sys.argv = ["etkit", *request["argv"]]
        runpy.run_module("etkit", run_name="__main__", alter_sys=True)
    sys.exit(0)


if __name__ == "__main__":
    preload()
    run_command(serve(sys.argv[1], int(sys.argv[2])))
