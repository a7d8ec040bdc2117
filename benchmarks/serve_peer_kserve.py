"""The peer of benchmarks/serve.py: KServe's Python ModelServer serving an ONNX model with ONNX Runtime
(at its defaults) under the name `plain`, over KServe v2 REST and gRPC. Run from the folder KServe is
installed in (`pip install --target DIR kserve==0.21.0`; PYTHONPATH=DIR), never from fusegraph's venv.

    python benchmarks/serve_peer_kserve.py MODEL.onnx --http-port 18010 --grpc-port 18011
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    args = ap.parse_args()
    sys.argv = sys.argv[:1]  # kserve parses the command line at import
    import kserve
    import onnxruntime as ort
    from kserve.protocol.infer_type import InferOutput, InferRequest, InferResponse

    class OrtModel(kserve.Model):
        def __init__(self, name: str, path: str):
            super().__init__(name)
            self.sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            self.input_name = self.sess.get_inputs()[0].name
            self.ready = True

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

    kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port).start([OrtModel("plain", args.model)])


if __name__ == "__main__":
    main()
