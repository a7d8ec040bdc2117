"""The second peer of benchmarks/serve.py: MLServer 1.7 serving an ONNX model with ONNX Runtime (at its
defaults) under the name `plain`, over KServe v2 REST and gRPC. `mlserver-onnx` is not on PyPI, so the
runtime is the few lines of `OnnxRuntimeModel` below, as MLServer's docs write a custom runtime. Run it
with the python of MLServer's own venv, never fusegraph's (MLServer's `inference` protos would clash with
tritonclient's, and it needs uvloop 0.21: with 0.23 its workers crash):

    python -m venv DIR && DIR/bin/pip install mlserver==1.7.1 uvloop==0.21.0 onnxruntime
    DIR/bin/python benchmarks/serve_peer_mlserver.py MODEL.onnx --http-port 18020 --grpc-port 18021 \
        --metrics-port 18022 [--config-json FILE --config-pb FILE]

MLServer runs at its defaults otherwise (`debug` off: on, it logs every request): one inference worker
process (`parallel_workers`), no adaptive batching. Its REST front end has no binary tensor extension:
HTTP clients send it JSON. As for the KServe peer, `--config-json` / `--config-pb` add the ModelConfig endpoint that
perf_analyzer needs and MLServer lacks (`GET /v2/models/plain/config`, gRPC `ModelConfig`); inference
stays MLServer's own. Everything binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import numpy as np
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntimeModel(MLModel):
    """An ONNX model on ONNX Runtime's CPU provider at its defaults (the file: `parameters.uri`)."""

    async def load(self) -> bool:
        import onnxruntime as ort

        self.sess = ort.InferenceSession(self.settings.parameters.uri, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.sess.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        outs = self.sess.run(None, feeds)
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=[
            NumpyCodec.encode_output(name, np.asarray(arr)) for name, arr in zip(self.output_names, outs, strict=True)])


def _add_model_config(config_json: dict | None, config_pb: bytes | None) -> None:
    """Patch MLServer's front ends to answer ModelConfig for `plain` with the given config."""
    from mlserver.grpc import server as grpc_server
    from mlserver.rest import server as rest_server

    if config_pb is not None:
        from serve_peer_config import add_model_config

        make_aio = grpc_server.aio.server

        def aio_server(*args, **kwargs):
            server = make_aio(*args, **kwargs)
            add_model_config(server, config_pb)
            return server

        grpc_server.aio = type("aio", (), {"server": staticmethod(aio_server)})
    if config_json is not None:
        create_app = rest_server.create_app

        def app_with_config(*args, **kwargs):
            from fastapi.responses import JSONResponse

            app = create_app(*args, **kwargs)

            async def model_config():
                return JSONResponse(config_json)
            app.router.routes.insert(0, _route(app, "/v2/models/plain/config", model_config))
            return app

        rest_server.create_app = app_with_config


def _route(app, path: str, endpoint):
    """A GET route for `path`, to put ahead of MLServer's `/v2/models/{name}` routes."""
    from fastapi.routing import APIRoute

    return APIRoute(path, endpoint, methods=["GET"])


def _tensors(path: str) -> dict:
    """The model's inputs and outputs as MLServer metadata (perf_analyzer reads them; MLServer lists none
    of its own for a custom runtime)."""
    import onnxruntime as ort
    from mlserver.types import MetadataTensor

    kinds = {"tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(int64)": "INT64"}
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def meta(args):
        return [MetadataTensor(name=a.name, datatype=kinds[a.type],
                               shape=[d if isinstance(d, int) else -1 for d in a.shape]) for a in args]

    return {"inputs": meta(sess.get_inputs()), "outputs": meta(sess.get_outputs())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--config-json", type=Path, help="the model config, Triton's JSON, for GET .../config")
    ap.add_argument("--config-pb", type=Path, help="a serialized ModelConfigResponse, for gRPC ModelConfig")
    args = ap.parse_args()
    import json

    from mlserver import MLServer
    from mlserver.settings import ModelParameters, ModelSettings, Settings

    # the runtime is imported by name in MLServer's worker processes, and serve_peer_config here: this
    # file's folder is on their path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _add_model_config(json.loads(args.config_json.read_text()) if args.config_json else None,
                      args.config_pb.read_bytes() if args.config_pb else None)
    from serve_peer_mlserver import OnnxRuntimeModel as Runtime

    work = tempfile.mkdtemp(prefix="mlserver_peer_")
    # debug off (its default is on: a log line per request), its better configuration for a benchmark
    settings = Settings(debug=False, host="127.0.0.1", http_port=args.http_port, grpc_port=args.grpc_port,
                        metrics_port=args.metrics_port, metrics_dir=work, model_repository_root=work,
                        load_models_at_startup=False)
    model = ModelSettings(name="plain", implementation=Runtime, parameters=ModelParameters(uri=args.model),
                          **_tensors(args.model))

    async def serve() -> None:  # MLServer starts its worker pool from inside the running loop
        await MLServer(settings).start([model])

    asyncio.run(serve())


if __name__ == "__main__":
    main()
