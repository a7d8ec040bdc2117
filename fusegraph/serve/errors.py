"""The serving errors: each carries the protocol status it is answered with (gRPC code and HTTP status)."""

from __future__ import annotations

from ..errors import FusegraphError


class ServeError(FusegraphError):
    """A request or a model repository the server cannot honour; `grpc_code` names a grpc.StatusCode."""

    grpc_code = "INTERNAL"
    http_status = 500


class InvalidRequestError(ServeError):
    """A request's inputs, outputs or parameters do not match the model's configuration."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


class ModelNotFoundError(ServeError):
    """A model name or version the repository does not hold (or has not loaded)."""

    grpc_code = "NOT_FOUND"
    http_status = 404


class UnavailableError(ServeError):
    """The model is not ready (loading, failed, unloaded) or the server is shutting down."""

    grpc_code = "UNAVAILABLE"
    http_status = 503


class QueueFullError(ServeError):
    """The model's queue holds its limit of pending requests: the request is rejected, not queued."""

    grpc_code = "RESOURCE_EXHAUSTED"
    http_status = 429


class RequestTimeoutError(ServeError):
    """The request's timeout passed before the model could run it."""

    grpc_code = "DEADLINE_EXCEEDED"
    http_status = 504


class ModelConfigError(ServeError):
    """A model repository entry (config.pbtxt, version folders, model file) is malformed or unsupported."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


class ModelExecutionError(ServeError):
    """The model raised while running a batch: the requests of that batch fail with this error."""

    grpc_code = "INTERNAL"
    http_status = 500
