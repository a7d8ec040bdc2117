"""A model instance's worker process: `python -m fusegraph.serve.worker FD ARENA_FD`, started by
`process.py` (ARENA_FD: the memfd its batches' inputs are written to, `arena.py`).

It loads the model (compiling it for its target; a GPU worker sees only its device, which the server
names in CUDA_VISIBLE_DEVICES), answers `ready` with the completed config and the tensor specs (or
`error` with the reason the load failed), then runs the batches it is sent, one at a time, until it is
told to stop or the server's end of the socket closes. The process exits on its own when the server
goes away, so a killed server leaves no workers behind once their batch is done.
"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import numpy as np

from . import wire
from .arena import Arena
from .errors import ServeError


def _load(init: dict):
    from google.protobuf import text_format

    from . import config as cfg
    from .model import ServedModel

    config = text_format.Parse(init["config"], cfg.pb().ModelConfig())
    entry = cfg.ModelEntry(init["name"], config, {init["version"]: Path(init["path"])}, init["explicit"])
    return ServedModel(entry, init["version"], Path(init["path"]), init["target"], init["cores"])


def _input_bytes(model) -> int:
    """The arena a batch's inputs need: each input at the largest batch, on cache-line boundaries."""
    batch = max(model.max_batch_size, 1)
    sizes = [s.datatype.numpy.itemsize * batch * int(np.prod(s.dims, dtype=np.int64)) for s in model.inputs]
    return sum(-(-n // 64) * 64 for n in sizes)


def _describe(model) -> dict:
    from google.protobuf import text_format

    def specs(items):
        return [[s.name, s.datatype.name, list(s.dims)] for s in items]

    return {"op": "ready", "config": text_format.MessageToString(model.config), "target": model.target,
            "threads": model.threads, "input_bytes": _input_bytes(model), "solo_threads": model.solo_threads, "inputs": specs(model.inputs), "outputs": specs(model.outputs)}


def _failure(e: BaseException) -> dict:
    return {"op": "failed", "error": type(e).__name__, "message": str(e), "serve": isinstance(e, ServeError)}


def serve(sock: socket.socket, arena: Arena | None = None) -> int:
    init, _ = wire.recv(sock)
    try:
        model = _load(init)
    except Exception as e:  # the load's failure is the server's to report, as the model's state
        wire.send(sock, _failure(e))
        return 1
    wire.send(sock, _describe(model))
    while True:
        try:
            header, inputs = wire.recv(sock, arena)
        except wire.PeerClosed:
            return 0
        if header["op"] == "stop":
            return 0
        try:
            outputs = model.execute(inputs, header["n"], header["solo"])
        except Exception as e:  # a model that raises fails its batch only; this process serves on
            wire.send(sock, _failure(e))
            continue
        wire.send(sock, {"op": "done"}, outputs)


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group: the server drains, then stops its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    arena = Arena(int(argv[1])) if len(argv) > 1 else None
    try:
        return serve(sock, arena)
    except wire.PeerClosed:  # the server went away before the model was loaded
        return 0
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
