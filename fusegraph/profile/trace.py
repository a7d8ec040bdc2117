"""A Profile as a Chrome / Perfetto trace (the JSON "traceEvents" format: complete events, "ph": "X",
timestamps and durations in microseconds), as ONNX Runtime's and torch's profilers write them. One
process per program; lane (thread) 1 holds the compile phases and each run with its kernel steps
nested inside, further lanes what the target reports besides (the gpu's host launches)."""

from __future__ import annotations

import json
import os
from typing import Any

from .phases import MAIN
from .record import Profile


def _event(name: str, cat: str, t0_ns: float, t1_ns: float, tid: int, args: dict | None = None) -> dict:
    e = {"name": name, "cat": cat, "ph": "X", "ts": t0_ns / 1e3, "dur": max(t1_ns - t0_ns, 0) / 1e3,
         "pid": 1, "tid": tid}
    if args:
        e["args"] = args
    return e


def chrome_trace(profile: Profile, label: str = "") -> dict[str, Any]:
    """The trace as a dict: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
    Compile phases (`meta["phases"]`: (name, start ns, end ns[, lane])) come first, on the main lane
    unless they name another (phases.MAIN is the main one: a gpu compile's threads have their own)."""
    events: list[dict] = []
    phases = [(*p, MAIN)[:4] for p in profile.meta.get("phases", ())]
    origin = min([r[0][1] for r in profile.runs if r] + [p[1] for p in phases] or [0])
    lanes = {None: 1, **{lane: k + 2 for k, lane in enumerate(profile.lanes)}}
    threads = {lane: len(lanes) + k + 1 for k, lane in enumerate(dict.fromkeys(p[3] for p in phases if p[3] != MAIN))}
    for name, t0, t1, lane in phases:
        events.append(_event(name, "compile", t0 - origin, t1 - origin, threads.get(lane, 1)))
    names = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": lane or profile.target}}
             for lane, tid in {**lanes, **threads}.items()]
    names.append({"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                  "args": {"name": f"fusegraph {label} ({profile.target})".replace("  ", " ")}})
    for lane, tid in lanes.items():
        runs = profile.runs if lane is None else profile.lanes[lane]
        for k, run in enumerate(runs):
            if not run:
                continue
            if lane is None:
                events.append(_event(f"run {k}", "run", run[0][1] - origin, run[-1][2] - origin, tid))
            for uid, t0, t1 in run:
                info = profile.infos[uid]
                args = {"instruction": info.instruction, "onnx_nodes": [n.name for n in info.origin],
                        "onnx_op": info.onnx_op}
                events.append(_event(info.kernel, "kernel", t0 - origin, t1 - origin, tid, args))
    return {"traceEvents": names + events, "displayTimeUnit": "ms",
            "otherData": {"target": profile.target, "model": label}}


def write_chrome_trace(profile: Profile, path: str | os.PathLike, label: str = "") -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(profile, label), f)
