"""A running server: the repository, the gRPC, HTTP and metrics front ends, and an orderly shutdown."""

from __future__ import annotations

import contextlib
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFoundError, ServeError
from .repository import Repository
from .shared_memory import SharedMemoryRegistry

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"       # loopback unless asked: a server is reachable from where it binds
    http_port: int | None = 8000  # None: no such front end; 0: any free port
    grpc_port: int | None = 8001
    metrics_port: int | None = 8002
    default_target: str = "cpu"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    cores: int | None = None      # cores the instances share (None: those this process may use)
    load_models: tuple[str, ...] | None = None  # None: every model of the repository
    isolation: str | None = None  # "process" | "thread" instances (None: instances.default_isolation)


class Server:
    def __init__(self, source: str | Path, options: ServerOptions | None = None):
        self.options = options or ServerOptions()
        self.repo = Repository(Path(source), self.options.default_target, self.options.cores,
                               self.options.isolation)
        self.http_port = self.grpc_port = self.metrics_port = None
        self._http = self._grpc = self._metrics = None
        self.shared_memory = SharedMemoryRegistry()  # regions both front ends see, as Triton's
        self._stopped = threading.Event()  # stop() began
        self._done = threading.Event()     # stop() finished

    def start(self) -> Server:
        """Load the models (a failed one is reported by its state), then open the front ends."""
        o = self.options
        if o.load_models is None:
            self.repo.load_all()
        else:
            for name in o.load_models:
                if name not in self.repo.names():  # a typo is an error; a model that fails to load is a state
                    raise ModelNotFoundError(f"--load-model {name!r}: the repository has {self.repo.names()}")
                with contextlib.suppress(ServeError):
                    self.repo.load(name)
        if self._stopped.is_set():  # a signal came while the models loaded: open nothing
            return self
        try:
            self._open_front_ends()
        except BaseException:
            self.stop(grace_s=0)  # what did open closes again, and the instances stop
            raise
        return self

    def _open_front_ends(self) -> None:
        o = self.options
        if o.grpc_port is not None:
            from .grpc_server import start_grpc_server

            self._grpc, self.grpc_port = start_grpc_server(self.repo, o.host, o.grpc_port, o.max_message_bytes,
                                                           self.shared_memory)
        if o.http_port is not None:
            from .http_server import start_http_server

            self._http = start_http_server(self.repo, o.host, o.http_port, o.max_message_bytes,
                                           self.shared_memory)
            self.http_port = self._http.server_port
        if o.metrics_port is not None:
            from .metrics import start_metrics_server

            self._metrics, _ = start_metrics_server(self.repo, o.host, o.metrics_port)
            self.metrics_port = self._metrics.server_port

    def stop(self, grace_s: float = 10.0) -> None:
        """Graceful: refuse new calls, let in-flight ones finish (up to `grace_s`), drain the queues."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        # the front ends refuse new requests while those in flight run to their answers
        done = self._grpc.stop(grace_s) if self._grpc is not None else None
        http = threading.Thread(target=self._http.drain, args=(grace_s,)) if self._http is not None else None
        if http is not None:
            http.start()
        # queued requests run now, without waiting out their batching delay; a request still being
        # decoded when its model closes is answered UNAVAILABLE
        self.repo.close(drain=True, timeout_s=grace_s)
        if done is not None:
            done.wait(grace_s)
        if http is not None:
            http.join(grace_s)
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()
        self._done.set()

    def stop_on_signals(self) -> Server:
        """Make SIGINT and SIGTERM stop the server gracefully (call before start: a signal that comes while
        the models load stops it too). From the main thread only."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: threading.Thread(target=self.stop, daemon=True).start())
        return self

    def wait(self) -> None:
        """Block until stop() has finished."""
        while not self._done.wait(0.5):
            pass

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
