"""One engine in a process of its own, timed on request: `python -m fusegraph.driver.engine_worker SPEC`.

SPEC is a JSON file (written by fusegraph.driver.isolated): the engine ("fusegraph" or "onnxruntime"),
the model file (.onnx, or a compiled .fgx for fusegraph), the inputs (an .npz of arrays in `inputs`
order, read without pickle), and the engine's settings (fusegraph: target and threads; ORT: an
OrtConfig). Once loaded it prints one JSON line (`ready`, setup seconds, the settings), then answers
commands read one a line from stdin, one JSON line each:

    warmup N      N untimed runs                       -> {"ok": true}
    time N        N timed runs                         -> {"times": [seconds, ...]}
    outputs FILE  one run, its outputs saved to FILE (.npz, positional)   -> {"ok": true}

End of input ends it. Errors print {"error": "..."} and exit 1.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def _fusegraph(spec: dict[str, Any], feeds: dict[str, np.ndarray]) -> tuple[Callable[[], Any], dict[str, Any]]:
    import fusegraph

    model = Path(spec["model"])
    if model.suffix == ".fgx":
        program = fusegraph.load(model)
    else:
        program = fusegraph.parse_onnx(str(model), map_input_dims={k: list(v.shape) for k, v in feeds.items()})
        program.compile(fusegraph.get_target(spec.get("target", "cpu")),
                        fusegraph.CompileOptions(threads=spec.get("threads")))
    return (lambda: program.run(feeds)), {"target": spec.get("target", "cpu"), "threads": spec.get("threads")}


def _onnxruntime(spec: dict[str, Any], feeds: dict[str, np.ndarray]) -> tuple[Callable[[], Any], dict[str, Any]]:
    import onnx

    from .models import ModelSource
    from .ort import OrtConfig, OrtSession

    config = OrtConfig(**spec.get("ort", {}))
    path = Path(spec["model"])
    session = OrtSession(ModelSource(path.name, onnx.load(str(path), load_external_data=False), path=path), config)
    return (lambda: session.run(feeds)), {**config.to_json(), "label": config.label, "version": session.version}


ENGINES: dict[str, Callable[[dict[str, Any], dict[str, np.ndarray]], tuple[Callable[[], Any], dict[str, Any]]]] = {
    "fusegraph": _fusegraph, "onnxruntime": _onnxruntime}


def read_feeds(path: str | Path, names: list[str]) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[f"arr_{k}"] for k, name in enumerate(names)}


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve(spec: dict[str, Any]) -> None:
    feeds = read_feeds(spec["inputs_file"], spec["inputs"])
    t0 = time.perf_counter()
    run, settings = ENGINES[spec["engine"]](spec, feeds)
    _reply({"ready": True, "setup_s": time.perf_counter() - t0, "settings": settings})
    clock = time.perf_counter
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "warmup":
            for _ in range(int(arg)):
                run()
            _reply({"ok": True})
        elif cmd == "time":
            times = []
            for _ in range(int(arg)):
                t0 = clock()
                run()
                times.append(clock() - t0)
            _reply({"times": times})
        elif cmd == "outputs":
            np.savez(arg, *[np.asarray(o) for o in run()])
            _reply({"ok": True})
        else:
            _reply({"error": f"unknown command {cmd!r}"})


def _die_with_parent(parent: int | None) -> None:
    """On Linux, have the kernel kill this process when its parent ends: the parent keeps it stopped
    between requests, and a parent killed mid-measurement would otherwise leave it stopped forever."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import os
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:  # the parent ended before the request took effect
        sys.exit(1)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    _die_with_parent(spec.get("parent"))
    try:
        serve(spec)
    except Exception as e:  # the parent shows the message; this process has nothing else to report to
        _reply({"error": f"{type(e).__name__}: {' '.join(str(e).split())}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
