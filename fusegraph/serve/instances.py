"""A model's instances, in this process (`thread` isolation) or each in its own (`process`), and the
model as the front ends and the scheduler see it either way.

Thread instances share one ServedModel. Process instances each load the model in a worker; the server
keeps only what the first worker reports (the completed config and the tensor specs), so it validates
requests without compiling anything itself.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import config as cfg
from .errors import ModelConfigError
from .model import ServedModel, TensorSpec, usable_cores
from .process import WorkerProcess
from .tensors import DATATYPES

ISOLATIONS = ("process", "thread")


def default_isolation(target: str) -> str:
    """GPU instances each need a process bound to their device; CPU instances get one too, so that a
    crash fails only that instance's batch (docs/serving.md gives the measured cost)."""
    return "process"


@functools.cache
def _gpu_count() -> int:
    try:
        import torch  # only for a GPU group that lists no gpus: the server places one per device
    except ModuleNotFoundError:
        raise ModelConfigError("a KIND_GPU instance group without `gpus` needs torch to count the GPUs: "
                               "pip install 'fusegraph[gpu]', or list the devices in `gpus`") from None
    return torch.cuda.device_count()


@dataclass
class RemoteModel:
    """What a process-isolated model is to the server: its name, config and tensor specs (no program)."""

    name: str
    version: int
    path: Path
    config: object
    target: str
    instances: int
    threads: int
    solo_threads: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    @classmethod
    def from_ready(cls, entry: cfg.ModelEntry, version: int, path: Path, ready: dict, instances: int) -> RemoteModel:
        from google.protobuf import text_format

        config = text_format.Parse(ready["config"], cfg.pb().ModelConfig())

        def specs(rows):
            return [TensorSpec(name, DATATYPES[dt], tuple(dims)) for name, dt, dims in rows]

        return cls(entry.name, version, path, config, ready["target"], instances, ready["threads"],
                   ready["solo_threads"], specs(ready["inputs"]), specs(ready["outputs"]))


def load_instances(entry: cfg.ModelEntry, version: int, path: Path, default_target: str, cores: int | None,
                   isolation: str | None) -> tuple[object, list]:
    """The model and its executors, one per instance (each has `execute(inputs, n)`)."""
    target = cfg.target_of(entry.config, default_target)
    mode = isolation or default_isolation(target)
    if mode not in ISOLATIONS:
        raise ModelConfigError(f"isolation {mode!r}: expected one of {', '.join(ISOLATIONS)}")
    devices = cfg.instance_devices(entry.config, target, _gpu_count)
    if mode == "thread":
        if len({d for d in devices if d is not None}) > 1:
            raise ModelConfigError(f"model {entry.name!r}: instances on GPUs {sorted(set(devices))} need "
                                   f"--isolation process (one process bound to each device)")
        model = ServedModel(entry, version, path, default_target, cores)
        return model, [model] * model.instances
    from google.protobuf import text_format

    # the math libraries' thread pools are sized for the larger of its two program sets
    threads = max(1, (cores or usable_cores()) // len(devices), cfg.solo_threads(entry.config))
    init = {"op": "init", "name": entry.name, "version": version, "path": str(path),
            "config": text_format.MessageToString(entry.config), "explicit": entry.explicit_config,
            "target": default_target, "cores": cores or usable_cores()}
    workers = [WorkerProcess(init, k, d, threads) for k, d in enumerate(devices)]
    try:
        ready = workers[0].start()  # the first reports the config; the others load alongside each other
        with ThreadPoolExecutor(max(1, len(workers) - 1)) as pool:
            for f in [pool.submit(w.start) for w in workers[1:]]:
                f.result()
    except BaseException:
        for w in workers:
            w.close()
        raise
    return RemoteModel.from_ready(entry, version, path, ready, len(workers)), workers
