"""Which GEMM template configs win the gpu target's tuning, from the tuner timings already recorded in
benchmarks/results (gpu_cold_compile's `tuning_us`, gpu_autotune's `candidate_us`; no GPU needed).

    python benchmarks/gpu_config_wins.py [--results benchmarks/results]

Per problem past autotune.SMALL_MACS (where tuning times several configs), every candidate recorded,
each at the median of its recorded timings; per config (as fitted to the problem): the problems that
timed it, those it won, how much slower each problem's choice would have been without it (the best of
the others against the best of all), and whether autotune.worth_timing still times it for any of
them. A config that never wins costs a compile on every fresh machine for nothing.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def recorded(folder: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(row, problem) -> candidate -> median µs, over every timing of the problem in `folder`."""
    samples: dict[tuple[str, str], dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))

    def visit(node, row: str | None) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, row)
        elif isinstance(node, dict):
            row = node.get("row") or (f"{node['model']}:{node['batch']}" if "model" in node and "batch" in node else row)
            for field in ("tuning_us", "candidate_us"):
                for problem, times in (node.get(field) or {}).items():
                    if problem.startswith(("dot ", "conv ")) and isinstance(times, dict):
                        for name, us in times.items():
                            samples[(row, problem)][name].append(us)
            for value in node.values():
                visit(value, row)

    for path in sorted(folder.glob("*.json")):
        visit(json.loads(path.read_text()), None)
    return {key: {name: statistics.median(us) for name, us in times.items()} for key, times in samples.items()}


def problem_dims(problem: str) -> tuple[int, int, int]:
    """(M, N, K) of a tuned problem's key ("dot 128x2304x768 float16->float16 ...")."""
    m, n, k = map(int, problem.split()[1].split("x"))
    return m, n, k


def main() -> None:
    from fusegraph.targets.gpu.autotune import H100_SMS, LIBRARY, SMALL_MACS, worth_timing

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    problems, today = {}, set()
    for (row, problem), times in recorded(Path(args.results)).items():
        m, n, k = problem_dims(problem)
        if m * n * k > SMALL_MACS and len(times.keys() - {LIBRARY}) >= 2:
            problems[(row, problem)] = times
            today |= {c.name() for c in worth_timing(m, n, k, H100_SMS)}
    wins: collections.Counter = collections.Counter()
    losses: dict[str, list[float]] = collections.defaultdict(list)
    for times in problems.values():
        best = min(times.values())
        wins[min(times, key=times.__getitem__)] += 1
        for name in times.keys() - {LIBRARY}:
            losses[name].append(min(us for other, us in times.items() if other != name) / best - 1)
    rows = sorted({row for row, _ in problems})
    print(f"{len(problems)} problems of {len(rows)} rows: {', '.join(rows)}; the library won {wins[LIBRARY]}")
    for name in sorted(losses, key=lambda n: -len(losses[n])):
        lost = losses[name]
        print(f"{name:22s} timed in {len(lost):3d}  won {wins[name]:3d}  without it: worst {max(lost):6.1%}, "
              f"mean {statistics.mean(lost):6.2%}, {sum(x > 0.01 for x in lost):2d} problems more than 1 % slower"
              f"{'' if name in today else '  (not timed today)'}")


if __name__ == "__main__":
    main()
