"""Model instances in worker processes (`--isolation process`): the server's side of `worker.py`.

Each instance is one process, started fresh (`python -m fusegraph.serve.worker`, no fork of a threaded
server, nothing pickled), talking over a socket pair (`wire.py`). A GPU instance's process sees only its
device. When a worker dies, the batch it was running fails with WorkerCrashedError; a batch it never
received goes back to the queue (it ran nowhere, so it is answered once); the instance's thread starts
a new process before it takes more work, while the other instances go on serving.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import wire
from .arena import Arena
from .errors import ModelConfigError, WorkerCrashedError, execution_error, serve_error_class

log = logging.getLogger("fusegraph.serve")

_RESTART_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)  # between failed restarts of one instance
_STOP_GRACE_S = 5.0
# the math libraries a compiled model may use read these at import: one value per worker's share
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class WorkerNotRunning(ConnectionError):
    """The worker was gone before it received the batch: the batch ran nowhere and may run elsewhere."""


def _exit_text(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class WorkerProcess:
    """One instance of one model in its own process; `execute` is called by that instance's thread only."""

    def __init__(self, init: dict, instance: int, device: int | None, threads: int):
        self.init, self.instance, self.device, self.threads = init, instance, device, threads
        self.name = init["name"]
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.arena: Arena | None = None  # the batches' inputs, shared with the current process
        self.starts = 0        # processes that loaded the model (the first, then each restart)
        self._ready = False    # the current process has loaded the model and not died since
        self._lock = threading.Lock()

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _env(self) -> dict[str, str]:
        import fusegraph

        env = dict(os.environ)
        root = str(Path(fusegraph.__file__).resolve().parents[1])  # the child imports this very fusegraph
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        for var in _THREAD_VARS:
            env[var] = str(self.threads)
        # OMP_WAIT_POLICY and the like come from the server's environment: spinning is faster on cores of
        # one's own, PASSIVE on shared ones (docs/serving.md has the figures)
        if self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.device)
        return env

    def start(self) -> dict:
        """Start the process and wait for its model to load: its `ready` header. A load that fails is a
        ModelConfigError with the worker's reason; the process is gone then."""
        parent, child = socket.socketpair()
        self.arena = Arena.create()
        try:
            fds = (child.fileno(), self.arena.fd)
            self.proc = subprocess.Popen([sys.executable, "-m", "fusegraph.serve.worker", *map(str, fds)],
                                         pass_fds=fds, env=self._env(), stdin=subprocess.DEVNULL)
        finally:
            child.close()
        self.sock = parent
        try:
            wire.send(parent, self.init)
            header, _ = wire.recv(parent)
        except (ConnectionError, OSError):
            code = self._reap()
            raise ModelConfigError(f"model {self.name!r}: the worker process of instance {self.instance} "
                                   f"{_exit_text(code)} while loading the model") from None
        if header["op"] != "ready":
            self._reap()
            raise ModelConfigError(f"model {self.name!r} failed to load: {self.init['path']}: "
                                   f"{header['error']}: {header['message']}")
        self.arena.map(header["input_bytes"])
        self.starts += 1
        self._ready = True
        return header

    def _reap(self, grace_s: float = _STOP_GRACE_S) -> int | None:
        self._ready = False
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.arena is not None:
            self.arena.close()
            self.arena = None
        if self.proc is None:
            return None
        try:
            return self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    @property
    def running(self) -> bool:
        return self._ready and self.proc is not None and self.proc.poll() is None

    def gather(self, parts: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
        """A batch's inputs, concatenated into the worker's arena (then `execute` sends only their place)."""
        arena = self.arena
        if arena is None:  # no process: execute says so
            return {k: np.concatenate(v) if len(v) > 1 else v[0] for k, v in parts.items()}
        return arena.gather(parts)

    def execute(self, inputs: dict[str, np.ndarray], n: int, solo: bool = False) -> dict[str, np.ndarray]:
        with self._lock:
            if not self.running:
                raise WorkerNotRunning(f"model {self.name!r} instance {self.instance}: no worker process")
            try:
                wire.send(self.sock, {"op": "run", "n": n, "solo": solo}, inputs, self.arena)
            except OSError as e:
                raise WorkerNotRunning(f"model {self.name!r} instance {self.instance}: {e}") from None
            try:
                header, outputs = wire.recv(self.sock)
            except (ConnectionError, OSError):
                pid, code = self.pid, self._reap()
                raise WorkerCrashedError(f"model {self.name!r}: the worker process of instance {self.instance} "
                                         f"(pid {pid}) {_exit_text(code)} while running a batch of {max(n, 1)}; "
                                         f"it is restarted") from None
        if header["op"] == "failed":
            if header["serve"]:
                raise serve_error_class(header["error"])(header["message"])
            raise execution_error(self.name, n, header["error"], header["message"])
        return outputs

    def ensure_running(self, stopping: Callable[[], bool]) -> bool:
        """Restart the process if it is gone (retrying with backoff while its load fails); False when
        `stopping()` turned true first."""
        attempt = 0
        while not self.running:
            if stopping():
                return False
            old = self.pid
            self._reap(0.5)
            try:
                self.start()
            except ModelConfigError as e:
                wait = _RESTART_BACKOFF_S[min(attempt, len(_RESTART_BACKOFF_S) - 1)]
                log.warning("%s; retrying in %.1f s", e, wait)
                attempt += 1
                time.sleep(wait)
                continue
            log.warning("model %r instance %d: worker process %s replaced by %s", self.name, self.instance, old, self.pid)
        return True

    def close(self) -> None:
        """Ask the process to stop (after the batch it runs, if any), then make sure it is gone; a batch
        that does not end within the grace period is killed with its process."""
        if not self._lock.acquire(timeout=_STOP_GRACE_S):
            if self.proc is not None:
                self.proc.kill()
            self._lock.acquire()
        try:
            if self.sock is not None:
                try:
                    wire.send(self.sock, {"op": "stop"})
                except OSError:  # already gone
                    pass
            self._reap()
        finally:
            self._lock.release()
