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


class QueueFullError(UnavailableError):
    """The model's queue (of the request's priority level) holds its limit of pending requests: the
    request is rejected, not queued; UNAVAILABLE / 503 as Triton answers it, so clients retry."""


class RequestTimeoutError(ServeError):
    """The request's timeout passed before the model could run it."""

    grpc_code = "DEADLINE_EXCEEDED"
    http_status = 504


class ModelConfigError(ServeError):
    """A model repository entry (config.pbtxt, version folders, model file) is malformed or unsupported."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


class RequestCancelledError(ServeError):
    """The client cancelled the request (or went away) before it ran: it is dropped from the queue."""

    grpc_code = "CANCELLED"
    http_status = 499


class RegionNotFoundError(InvalidRequestError):
    """A request or a status query names a shared memory region that is not registered."""

    grpc_code = "NOT_FOUND"
    http_status = 404


class RegionExistsError(InvalidRequestError):
    """A shared memory region is registered under a name already taken (unregister it first)."""

    grpc_code = "ALREADY_EXISTS"
    http_status = 409


class NotSupportedError(ServeError):
    """A protocol extension this server does not implement (CUDA shared memory)."""

    grpc_code = "UNIMPLEMENTED"
    http_status = 501


class ModelExecutionError(ServeError):
    """The model raised while running a batch: the requests of that batch fail with this error."""

    grpc_code = "INTERNAL"
    http_status = 500


class WorkerCrashedError(ModelExecutionError):
    """A model instance's worker process died while it ran a batch: that batch's requests fail with
    this error, the process is restarted, and the other requests are unaffected."""


def execution_error(model: str, n: int, kind: str, message: str) -> ModelExecutionError:
    """The error a batch's requests get when the model raised `kind: message` on it (thread or process)."""
    return ModelExecutionError(f"model {model!r} failed on a batch of {max(n, 1)}: {kind}: {message}")


def serve_error_class(name: str) -> type[ServeError]:
    """The ServeError subclass called `name` (errors crossing from a worker process travel by name)."""
    found = {c.__name__: c for c in _subclasses(ServeError)}
    return found.get(name, ModelExecutionError)


def _subclasses(cls: type) -> list[type]:
    return [cls] + [s for c in cls.__subclasses__() for s in _subclasses(c)]
