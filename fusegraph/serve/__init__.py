"""`fusegraph serve`: a model server speaking the KServe v2 / Triton inference protocol over gRPC and
HTTP, with dynamic batching and Prometheus metrics. Needs the `serve` extra (grpcio, tritonclient,
prometheus-client); see docs/serving.md.

    from fusegraph.serve import Server, ServerOptions
    with Server("models/", ServerOptions(http_port=0, grpc_port=0)) as s:
        ...  # s.http_port, s.grpc_port
"""

from .server import Server, ServerOptions

__all__ = ["Server", "ServerOptions"]
