"""What both peer servers of benchmarks/serve.py need added for perf_analyzer: the gRPC ModelConfig
method, which neither KServe nor MLServer serves. Imported in the peers' own environments (it needs
grpcio only): never imports fusegraph or tritonclient."""

from __future__ import annotations

_SERVICE = "inference.GRPCInferenceService"


def add_model_config(server, config_pb: bytes) -> None:
    """Answer ModelConfig on a grpc.aio `server` with `config_pb` (a serialized ModelConfigResponse): an
    unknown method of a registered service falls through to this generic handler."""
    import grpc

    async def model_config(request: bytes, context) -> bytes:
        return config_pb

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        _SERVICE, {"ModelConfig": grpc.unary_unary_rpc_method_handler(model_config)}),))
