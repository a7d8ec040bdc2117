"""`fusegraph.serve.ray`: a Ray Serve deployment wrapping a fusegraph program, for scale-out on an
existing Ray cluster (replicas, autoscaling, one GPU per replica). Needs `pip install 'fusegraph[ray]'`.

    from ray import serve
    from fusegraph.serve.ray import deployment

    app = deployment("resnet50.onnx", autoscaling_config={"min_replicas": 1, "max_replicas": 4})
    handle = serve.run(app, route_prefix="/resnet50")
    outputs = handle.infer.remote({"data": x}).result()        # Python: dict of numpy arrays
    # HTTP: POST /resnet50 with a KServe v2 JSON infer request (inputs with data), v2 JSON back

Each replica loads the model as `fusegraph serve` does (compiled per batch bucket at fixed shapes,
padded to the bucket), so the two front doors answer alike. A gpu replica asks Ray for one GPU: Ray
sets CUDA_VISIBLE_DEVICES for the replica's process, so each compiles for and runs on its own device.
The model file must be readable where the replicas run (a shared or replicated path).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from . import config as cfg
from .errors import InvalidRequestError, ServeError


class FusegraphReplica:
    """One replica: the model compiled for `target`, answering `infer` calls and v2 JSON over HTTP."""

    def __init__(self, model_path: str, target: str, max_batch_size: int | None, cores: int):
        from .model import ServedModel
        from .repository import LoadedModel

        path = Path(model_path)
        entry = cfg.single_file_entry(path)
        if max_batch_size is not None:
            entry.config.max_batch_size = max_batch_size
            entry.explicit_config = max_batch_size == 0  # 0: serve the model's own shapes
        self.model = ServedModel(entry, 1, path, target, cores)
        self._loaded = LoadedModel(self.model, None, None)  # what the v2 codecs read: name, specs

    def metadata(self) -> dict:
        from .views import model_metadata

        return model_metadata(self._loaded)

    def infer(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name for inputs by name (with the batch dim where the model batches)."""
        from .infer import check_input

        names = {s.name for s in self.model.inputs}
        if set(inputs) != names:
            raise InvalidRequestError(f"model {self.model.name!r} takes inputs {sorted(names)}, got {sorted(inputs)}")
        arrays = {}
        for name, value in inputs.items():
            arr = np.asarray(value)
            dt = check_input(self._loaded, name, _datatype_name(name, arr), arr.shape)
            arrays[name] = arr.astype(dt.numpy, copy=False)
        n = next(iter(arrays.values())).shape[0] if self.model.max_batch_size > 0 else 0
        if n and any(a.shape[0] != n for a in arrays.values()):
            raise InvalidRequestError(f"model {self.model.name!r}: inputs differ in batch size")
        return self.model.execute(arrays, n)

    async def __call__(self, request):
        """HTTP: a KServe v2 JSON infer request (binary tensors are for `fusegraph serve`)."""
        from starlette.responses import JSONResponse

        from .http_server import decode_infer, encode_infer

        try:
            header = json.loads(await request.body())
            inputs = decode_infer(self._loaded, header, memoryview(b""))
            outputs = self.infer(inputs)
        except json.JSONDecodeError as e:
            return JSONResponse({"error": f"the request's JSON is malformed: {e}"}, status_code=400)
        except ServeError as e:
            return JSONResponse({"error": str(e)}, status_code=e.http_status)
        body, _ = encode_infer(self._loaded, outputs, dict.fromkeys(outputs, False), header.get("id"))
        return JSONResponse(json.loads(body))


def _datatype_name(name: str, arr: np.ndarray) -> str:
    from .tensors import from_numpy

    dt = from_numpy(arr.dtype)
    if dt is None:
        raise InvalidRequestError(f"input {name!r}: dtype {arr.dtype} is not a protocol datatype")
    return dt.name


def deployment(model_path: str | Path, *, name: str = "fusegraph", target: str | None = None,
               num_replicas: int = 1, autoscaling_config: dict | None = None, max_batch_size: int | None = None,
               num_cpus: float = 1, num_gpus: float | None = None, max_ongoing_requests: int = 8,
               ray_actor_options: dict | None = None):
    """A bound Ray Serve application serving `model_path` (.onnx or .fgx). `target` defaults to gpu when
    `num_gpus` is given, else cpu; a gpu deployment's replicas get one GPU each unless `num_gpus` says
    otherwise. `autoscaling_config` (Ray Serve's: min_replicas, max_replicas, target_ongoing_requests,
    ...) replaces the fixed `num_replicas`."""
    from ray import serve

    target = target or ("gpu" if num_gpus else "cpu")
    options = {"num_cpus": num_cpus, **(ray_actor_options or {})}
    if num_gpus is not None or target == "gpu":
        options.setdefault("num_gpus", 1 if num_gpus is None else num_gpus)
    scale = {"autoscaling_config": autoscaling_config} if autoscaling_config else {"num_replicas": num_replicas}
    dep = serve.deployment(FusegraphReplica, name=name, ray_actor_options=options,
                           max_ongoing_requests=max_ongoing_requests, **scale)
    cores = max(1, int(options["num_cpus"]))  # the replica's compiled threads: the CPUs Ray gives it
    return dep.bind(str(Path(model_path).resolve()), target, max_batch_size, cores)
