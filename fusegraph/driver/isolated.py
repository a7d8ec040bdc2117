"""Timing engines each in a process of its own, in alternating rounds (see shared BENCHMARKS.md).

Measuring two runtimes in one process lets one's worker threads (ORT's spin after each run, so do
OpenMP's) take cores from the other's timing. Here every engine is a child process
(fusegraph.driver.engine_worker) and only one is ever running: between its rounds a child is stopped
(SIGSTOP), so none of its threads can run while another is timed. Each engine warms up first; a round
is one untimed run (the caches the other engine cooled) and then `runs` timed ones; the rounds
alternate engine by engine, and who goes first swaps every round. An engine's latency is the median
of its round medians.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FusegraphError
from .timing import summary

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding this `fusegraph`
_CAN_STOP = hasattr(signal, "SIGSTOP")


class EngineError(FusegraphError):
    """An engine's process failed to load or run the model."""


class EngineProcess:
    """One engine in its own process, stopped except while it answers a request."""

    def __init__(self, name: str, spec: Mapping[str, Any], workdir: Path):
        self.name = name
        spec_file = workdir / f"{name}.json"
        spec_file.write_text(json.dumps({**spec, "parent": os.getpid()}))
        self._stderr = open(workdir / f"{name}.stderr", "w+")  # a file: a full pipe would block the child
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen([sys.executable, "-m", "fusegraph.driver.engine_worker", str(spec_file)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      text=True, env=env)
        ready = self._read()
        self.setup_s: float = ready["setup_s"]
        self.settings: dict[str, Any] = ready["settings"]
        self._stop()

    def request(self, command: str) -> dict[str, Any]:
        self._cont()
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            return self._read()
        finally:
            self._stop()

    def times(self, runs: int) -> list[float]:
        return self.request(f"time {runs}")["times"]

    def outputs(self, path: Path) -> list[np.ndarray]:
        self.request(f"outputs {path}")
        with np.load(path, allow_pickle=False) as data:
            return [data[f"arr_{k}"] for k in range(len(data.files))]

    def close(self) -> None:
        self._cont()
        if self._proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        reply = json.loads(line) if line.startswith("{") else None
        if reply is None or "error" in reply:
            self._stderr.seek(0)
            tail = " ".join(self._stderr.read()[-2000:].split())
            why = reply["error"] if reply else f"it exited ({tail or 'no message'})"
            raise EngineError(f"{self.name}: {why}")
        return reply

    def _stop(self) -> None:
        if _CAN_STOP and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGSTOP)
            # the signal is asynchronous: wait until the child is stopped before anyone else is timed
            os.waitpid(self._proc.pid, os.WUNTRACED)

    def _cont(self) -> None:
        if _CAN_STOP and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def engines(specs: Mapping[str, Mapping[str, Any]], feeds: Mapping[str, np.ndarray]) -> Iterator[dict[str, EngineProcess]]:
    """Start one process per spec (engine, model, settings; the inputs are added), closed on exit.
    A spec's "model" is a file path or an onnx.ModelProto (written to a temporary file)."""
    with tempfile.TemporaryDirectory(prefix="fusegraph-engines-") as tmp:
        workdir = Path(tmp)
        inputs_file = workdir / "inputs.npz"
        np.savez(inputs_file, *[np.asarray(v) for v in feeds.values()])
        started: dict[str, EngineProcess] = {}
        try:
            for name, spec in specs.items():
                model = spec["model"]
                if not isinstance(model, (str, os.PathLike)):
                    path = workdir / f"{name}.onnx"
                    path.write_bytes(model.SerializeToString())
                    model = path
                started[name] = EngineProcess(name, {**spec, "model": str(model), "inputs_file": str(inputs_file),
                                                     "inputs": list(feeds)}, workdir)
            yield started
        finally:
            for proc in started.values():
                proc.close()


def measure_rounds(procs: Mapping[str, EngineProcess], rounds: int, runs: int, warmup: int,
                   on_round: Callable[[int], None] | None = None) -> dict[str, list[list[float]]]:
    """Seconds per run of each engine, per round: `warmup` untimed runs each first, then `rounds`
    rounds in which each engine in turn (order reversed every other round) makes one untimed run and
    `runs` timed ones."""
    names = list(procs)
    for name in names:
        procs[name].request(f"warmup {warmup}")
    out: dict[str, list[list[float]]] = {name: [] for name in names}
    for k in range(rounds):
        for name in names if k % 2 == 0 else reversed(names):
            out[name].append(procs[name].times(runs + 1)[1:])
        if on_round is not None:
            on_round(k)
    return out


def round_summary(rounds: list[list[float]], batch: int = 1) -> dict[str, Any]:
    """timing.summary over every timed run, with the median as the median of the round medians."""
    flat = [t for r in rounds for t in r]
    s: dict[str, Any] = summary(flat, batch)
    median = float(np.median([np.median(r) for r in rounds])) * 1e3
    s.update(median_ms=median, throughput=batch / (median / 1e3) if median > 0 else float("inf"),
             rounds=len(rounds), runs_per_round=len(rounds[0]) if rounds else 0)
    return s
