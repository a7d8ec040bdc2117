"""The peer of benchmarks/serve.py: KServe's Python ModelServer serving an ONNX model with ONNX Runtime
(at its defaults) under the name `plain`, over KServe v2 REST and gRPC. Run from the folder KServe is
installed in (`pip install --target DIR kserve==0.21.0`; PYTHONPATH=DIR), never from fusegraph's venv.

    python benchmarks/serve_peer_kserve.py MODEL.onnx --http-port 18010 --grpc-port 18011 \
        [--config-json FILE --config-pb FILE]

KServe has no ModelConfig endpoint, and perf_analyzer will not run without one: with `--config-json`
(the model config as Triton's JSON) and `--config-pb` (a serialized `ModelConfigResponse`, made by the
driver, which has tritonclient's protos: KServe's own `inference` protos would clash with them in one
process) this answers `GET /v2/models/plain/config` and gRPC `ModelConfig` with those bytes. Only the
config is added; inference runs through KServe's own code. Both front ends bind 127.0.0.1 (KServe binds
every address).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _loopback_only(config_pb: bytes | None) -> None:
    """Patch KServe's front ends: bind loopback, and answer ModelConfig where a config is given."""
    from kserve.protocol.grpc import server as grpc_server
    from kserve.protocol.rest import server as rest_server

    from benchmarks.serve_peer_config import add_model_config

    make_aio = grpc_server.aio.server

    def aio_server(*args, **kwargs):
        server = make_aio(*args, **kwargs)
        bind = server.add_insecure_port
        server.add_insecure_port = lambda addr: bind(addr.replace("[::]", "127.0.0.1"))
        if config_pb is not None:
            add_model_config(server, config_pb)
        return server

    grpc_server.aio = type("aio", (), {"server": staticmethod(aio_server)})
    init = rest_server.RESTServer.__init__

    def rest_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.config.host = "127.0.0.1"

    rest_server.RESTServer.__init__ = rest_init


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--config-json", type=Path, help="the model config, Triton's JSON, for GET .../config")
    ap.add_argument("--config-pb", type=Path, help="a serialized ModelConfigResponse, for gRPC ModelConfig")
    args = ap.parse_args()
    sys.argv = sys.argv[:1]  # kserve parses the command line at import
    import kserve
    import onnxruntime as ort
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

    _loopback_only(args.config_pb.read_bytes() if args.config_pb else None)

    class OrtModel(kserve.Model):
        def __init__(self, name: str, path: str):
            super().__init__(name)
            self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            self.input_name = self.sess.get_inputs()[0].name
            self.ready = True

        # the metadata perf_analyzer reads the tensors from (KServe's default lists none)
        def _types(self, args) -> list[dict]:
            kinds = {"tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(int64)": "INT64"}
            return [{"name": a.name, "datatype": kinds[a.type],
                     "shape": [d if isinstance(d, int) else -1 for d in a.shape]} for a in args]

        def get_input_types(self) -> list[dict]:
            return self._types(self.sess.get_inputs())

        def get_output_types(self) -> list[dict]:
            return self._types(self.sess.get_outputs())

        def predict(self, payload: InferRequest, headers=None, response_headers=None) -> InferResponse:
            x = payload.inputs[0].as_numpy()
            outs = self.sess.run(None, {self.input_name: x})
            infer_outputs = []
            for meta, arr in zip(self.sess.get_outputs(), outs, strict=True):
                o = InferOutput(meta.name, list(arr.shape), "FP32")
                o.set_data_from_numpy(np.asarray(arr, np.float32), binary_data=True)
                infer_outputs.append(o)
            return InferResponse(response_id=payload.id, model_name=self.name, infer_outputs=infer_outputs,
                                 use_binary_outputs=True)

    server = kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port)
    if args.config_json is not None:
        import json

        _route_config(json.loads(args.config_json.read_text()))
    server.start([OrtModel("plain", args.model)])


def _route_config(config: dict) -> None:
    """Add GET /v2/models/plain/config to KServe's FastAPI app (its module-level `app`; added before
    KServe's own routes, so it is matched before `/v2/models/{name}`)."""
    from fastapi.responses import JSONResponse
    from kserve import model_server

    async def model_config():
        return JSONResponse(config)

    model_server.app.add_api_route("/v2/models/plain/config", model_config, methods=["GET"])


if __name__ == "__main__":
    main()
