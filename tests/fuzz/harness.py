"""Runs fuzz cases in worker processes, so that a crash or a hang is counted instead of ending the run.

A worker (`python -m tests.fuzz.harness`) reads one case per line on stdin (`family seed`), runs it
under an address-space limit, and writes its outcome as one JSON line. The parent gives each case a
time limit; a worker that dies (a signal: a crash) or overruns (a hang) is counted and replaced, and
the cases after it go to the new worker. Cases are generated in the worker from (family, seed), so a
failing case is reproduced with `python -m tests.fuzz.harness --one FAMILY SEED`.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import json
import os
import resource
import select
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 6 << 30  # address space per worker: ORT, numpy and a C compiler's children fit well under it
# Outcomes a case may end with. GOOD ones are fine (skipped: the seed made no case, e.g. a node without
# attributes to mutate; oracle-failed: ONNX Runtime crashed or hung on what fusegraph had run, so it
# is unjudged); every other one fails the suite.
GOOD = ("ok-correct", "typed-error", "skipped", "oracle-failed")
BAD = ("crash", "hang", "untyped-error", "accepted-invalid", "wrong-result")


@dataclasses.dataclass
class Result:
    family: str
    seed: int
    outcome: str
    detail: str = ""


def _worker_main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    # imports fusegraph, onnx, ORT: after the limit is set
    from tests.fuzz.families import run_case

    print("ready", flush=True)
    for line in sys.stdin:
        family, seed = line.split()
        outcome, detail = run_case(family, int(seed))
        print(json.dumps({"outcome": outcome, "detail": detail[:400]}), flush=True)


class Worker:
    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.harness", "--worker"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pending = b""
        if self._read(120) != "ready":
            raise RuntimeError("a fuzz worker did not start")

    def _read(self, timeout: float) -> str | None:
        """The next line from the worker; "" at its end (it died); None if none came within `timeout`.
        Reads the pipe's bytes itself: a buffered reader could hold a second line that select() then
        never reports."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode("utf-8", errors="replace").strip() or " "

    def run(self, family: str, seed: int, timeout: float) -> tuple[str, str, str]:
        """The case's (outcome, detail, phase). Outcome "" when the worker died or hung: phase then
        says whether fusegraph or the oracle (ONNX Runtime) was running."""
        self.proc.stdin.write(f"{family} {seed}\n".encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        phase, note = "fusegraph", ""
        while (line := self._read(max(0.0, deadline - time.monotonic()))) is not None:
            if not line:  # end of output: the worker died
                return "", note, phase
            if line.startswith(("phase ", "note ")):
                kind, _, text = line.partition(" ")
                phase, note = (text, note) if kind == "phase" else (phase, text)
                continue
            if not line.startswith("{"):  # something a library printed: not the outcome
                continue
            out = json.loads(line)
            return out["outcome"], out["detail"], phase
        return "", f"timeout {note}", phase

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        return self.proc.returncode


def run_cases(cases: Iterable[tuple[str, int]], *, workers: int = 2, timeout: float = 30.0,
              timeouts: Mapping[str, float] | None = None) -> list[Result]:
    """Run (family, seed) cases on `workers` worker processes; each case may take `timeout` seconds
    (`timeouts[family]` where given)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "ORT_LOGGING_LEVEL": "3"}
    queue = collections.deque(cases)
    pool: list[Worker | None] = [None] * workers
    results: list[Result] = []

    def drive(slot: int) -> list[Result]:
        out: list[Result] = []
        while True:
            try:
                family, seed = queue.popleft()
            except IndexError:
                break
            if pool[slot] is None:
                pool[slot] = Worker(env)
            w = pool[slot]
            start = time.monotonic()
            outcome, detail, phase = w.run(family, seed, (timeouts or {}).get(family, timeout))
            if not outcome:
                hung = detail.startswith("timeout")
                note = detail.removeprefix("timeout").strip()
                code = w.stop()
                pool[slot] = None
                detail = f"after {time.monotonic() - start:.1f} s" if hung else f"exit status {code}"
                # the oracle failing says nothing about fusegraph, which had already run the case
                outcome = "oracle-failed" if phase == "oracle" else "hang" if hung else "crash"
                detail = f"{note}: {phase}: {detail}" if note else f"{phase}: {detail}"
            out.append(Result(family, seed, outcome, detail))
        if pool[slot] is not None:
            pool[slot].proc.stdin.close()
            pool[slot].stop()
        return out

    with cf.ThreadPoolExecutor(workers) as ex:
        for part in ex.map(drive, range(workers)):
            results.extend(part)
    return results


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
    elif sys.argv[1:2] == ["--one"]:
        from tests.fuzz.families import run_case

        print(run_case(sys.argv[2], int(sys.argv[3])))
    else:
        sys.exit("usage: python -m tests.fuzz.harness --one FAMILY SEED")
