"""What the metadata, config, statistics and index endpoints answer, as the protocol's JSON: the HTTP
front end sends these dicts, the gRPC one parses them into tritonclient's response messages."""

from __future__ import annotations

import base64

from .repository import LoadedModel, Repository
from .stats import PHASES, Duration

SERVER_NAME = "fusegraph"
EXTENSIONS = ["model_configuration", "model_repository", "statistics", "binary_tensor_data", "schedule_policy"]


def server_metadata() -> dict:
    from .. import __version__

    return {"name": SERVER_NAME, "version": __version__, "extensions": EXTENSIONS}


def model_metadata(loaded: LoadedModel) -> dict:
    model = loaded.model
    batch = [-1] if model.max_batch_size > 0 else []

    def tensors(specs):
        return [{"name": s.name, "datatype": s.datatype.name, "shape": [*batch, *s.dims]} for s in specs]

    return {"name": model.name, "versions": [loaded.version], "platform": f"fusegraph_{model.target}",
            "inputs": tensors(model.inputs), "outputs": tensors(model.outputs)}


def _duration(d: Duration) -> dict:
    return {"count": d.count, "ns": d.ns}


def model_statistics(loaded: LoadedModel) -> dict:
    s = loaded.stats.snapshot()
    zero = {"count": 0, "ns": 0}
    return {"name": loaded.name, "version": loaded.version, "last_inference": s["last_inference_ms"],
            "inference_count": s["inference_count"], "execution_count": s["execution_count"],
            "inference_stats": {"success": _duration(s["success"]), "fail": _duration(s["fail"]),
                                "queue": _duration(s["queue"]),
                                **{name: _duration(s[name]) for name in PHASES},
                                "cache_hit": zero, "cache_miss": zero},
            "batch_stats": [{"batch_size": b, **{name: _duration(d[name]) for name in PHASES}}
                            for b, d in s["batches"].items()]}


def statistics(repo: Repository, name: str = "", version: str = "") -> dict:
    models = [repo.get(name, version)] if name else repo.loaded()
    return {"model_stats": [model_statistics(m) for m in models]}


def repository_index(repo: Repository, ready_only: bool = False) -> list[dict]:
    rows = repo.index()
    return [r for r in rows if r["state"] == "READY"] if ready_only else rows


def message_to_json(msg) -> dict:
    """A protobuf message as Triton's HTTP JSON writes it: proto field names, enums by name, and 64-bit
    integers as JSON numbers (protobuf's json_format would write them as strings)."""
    out = {}
    for fd, value in msg.ListFields():
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            val_fd = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: _value(val_fd, v) for k, v in value.items()}
        elif fd.is_repeated:
            out[fd.name] = [_value(fd, v) for v in value]
        else:
            out[fd.name] = _value(fd, value)
    return out


def _value(fd, v):
    if fd.message_type is not None:
        return message_to_json(v)
    if fd.enum_type is not None:
        return fd.enum_type.values_by_number[v].name
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v
