"""KServe v2 over gRPC: `inference.GRPCInferenceService`, with tritonclient's generated modules (the one
copy of the protos in the process). Errors are answered with their status code and message."""

from __future__ import annotations

import functools
import queue
import threading
import time
from concurrent import futures
from dataclasses import dataclass

from . import views
from .errors import InvalidRequestError, ServeError
from .infer import check_input, infer
from .repository import Repository
from .shared_memory import SharedMemoryRegistry, ShmRef, cuda_unsupported
from .tensors import from_raw, from_values, to_raw


def _pb():
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    return service_pb2, service_pb2_grpc


def _answer(method):
    """Turn a ServeError into the protocol's status; anything else is INTERNAL, named, never a hang."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        import grpc

        try:
            return method(self, request, context)
        except ServeError as e:
            context.abort(getattr(grpc.StatusCode, e.grpc_code), str(e))
        except Exception as e:  # a bug: the client still gets a status naming it
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")

    return wrapper


# grpc reports a call without a deadline as one centuries away
_NO_DEADLINE_S = 1e7


def _uint_param(request, key: str) -> int:
    """An integer request parameter (tritonclient sends `priority` as uint64, `timeout` as int64)."""
    if key not in request.parameters:
        return 0
    p = request.parameters[key]
    kind = p.WhichOneof("parameter_choice")
    if kind not in ("int64_param", "uint64_param") or getattr(p, kind) < 0:
        raise InvalidRequestError(f"request parameter {key!r} must be a non-negative integer, got {kind}")
    return getattr(p, kind)


def _limits(request, context) -> tuple[float | None, float | None]:
    """The request's `timeout` parameter (microseconds, Triton's) and the call's deadline, in seconds."""
    timeout = _uint_param(request, "timeout") / 1e6 or None
    remaining = context.time_remaining()
    return timeout, remaining if remaining is not None and remaining < _NO_DEADLINE_S else None


def _shm_ref(params, what: str) -> ShmRef | None:
    """The shared memory placement in a tensor's parameters (`shared_memory_region`, ..._byte_size,
    ..._offset, as tritonclient's set_shared_memory sends them), or None."""
    if "shared_memory_region" not in params:
        return None

    def value(key: str, kind: str):
        p = params[key]
        if p.WhichOneof("parameter_choice") != kind:
            raise InvalidRequestError(f"{what}: parameter {key!r} must be {kind}")
        return getattr(p, kind)

    if "shared_memory_byte_size" not in params:
        raise InvalidRequestError(f"{what}: shared_memory_region without shared_memory_byte_size")
    offset = value("shared_memory_offset", "int64_param") if "shared_memory_offset" in params else 0
    return ShmRef(value("shared_memory_region", "string_param"), value("shared_memory_byte_size", "int64_param"),
                  offset)


def decode_request(loaded, request, shm: SharedMemoryRegistry):
    """The inputs of a ModelInferRequest (from shared memory, raw_input_contents or typed contents), its
    requested outputs, and those of them asked for in shared memory. raw_input_contents hold the inputs
    not in shared memory, in order (as tritonclient sends them)."""
    raw = list(request.raw_input_contents)
    placed = [_shm_ref(t.parameters, f"input {t.name!r}") for t in request.inputs]
    if raw and len(raw) != placed.count(None):
        raise InvalidRequestError(f"{placed.count(None)} inputs outside shared memory but {len(raw)} "
                                  f"raw_input_contents")
    inputs, raw_left = {}, iter(raw)
    for t, ref in zip(request.inputs, placed, strict=True):
        if t.name in inputs:
            raise InvalidRequestError(f"input {t.name!r} given more than once")
        dt = check_input(loaded, t.name, t.datatype, t.shape)
        if ref is not None:
            inputs[t.name] = shm.read(t.name, dt, t.shape, ref)
        elif raw:
            if t.HasField("contents"):
                raise InvalidRequestError(f"input {t.name!r} has both contents and raw_input_contents")
            inputs[t.name] = from_raw(t.name, dt, t.shape, next(raw_left))
        elif dt.contents is None:
            raise InvalidRequestError(f"input {t.name!r}: {dt.name} data must come as raw_input_contents")
        else:
            inputs[t.name] = from_values(t.name, dt, t.shape, getattr(t.contents, dt.contents))
    out_refs = {}
    for o in request.outputs:
        ref = _shm_ref(o.parameters, f"output {o.name!r}")
        if ref is not None:
            shm.check(o.name, ref)
            out_refs[o.name] = ref
    return inputs, [o.name for o in request.outputs], out_refs


@dataclass(frozen=True)
class _EndOfStream:
    count: int  # requests read from the stream


class InferenceServicer:
    """The servicer methods; `start_grpc_server` mixes them into the generated base class."""

    def __init__(self, repo: Repository, stream_workers: int, shm: SharedMemoryRegistry):
        self.repo, self.shm = repo, shm
        # runs the requests of streams; each waits for its answer, so this bounds their concurrency
        self.stream_pool = futures.ThreadPoolExecutor(stream_workers, thread_name_prefix="fusegraph-grpc-stream")

    @_answer
    def ServerLive(self, request, context):
        return _pb()[0].ServerLiveResponse(live=True)

    @_answer
    def ServerReady(self, request, context):
        return _pb()[0].ServerReadyResponse(ready=self.repo.all_ready())

    @_answer
    def ServerMetadata(self, request, context):
        return _pb()[0].ServerMetadataResponse(**views.server_metadata())

    @_answer
    def ModelReady(self, request, context):
        try:
            self.repo.get(request.name, request.version)
        except ServeError:
            return _pb()[0].ModelReadyResponse(ready=False)
        return _pb()[0].ModelReadyResponse(ready=True)

    @_answer
    def ModelMetadata(self, request, context):
        from google.protobuf import json_format

        meta = views.model_metadata(self.repo.get(request.name, request.version))
        return json_format.ParseDict(meta, _pb()[0].ModelMetadataResponse())

    @_answer
    def ModelConfig(self, request, context):
        return _pb()[0].ModelConfigResponse(config=self.repo.get(request.name, request.version).model.config)

    @_answer
    def ModelStatistics(self, request, context):
        from google.protobuf import json_format

        stats = views.statistics(self.repo, request.name, request.version)
        return json_format.ParseDict(stats, _pb()[0].ModelStatisticsResponse())

    def _infer(self, request, context):
        arrival = time.monotonic_ns()
        loaded = self.repo.get(request.model_name, request.model_version)
        timeout, deadline = _limits(request, context)

        def on_cancel(cancel):  # the call ends (answered, or the client cancelled it): drop it if still queued
            if not context.add_callback(cancel):
                cancel()  # already over

        out_refs: dict[str, ShmRef] = {}

        def build():
            inputs, names, refs = decode_request(loaded, request, self.shm)
            out_refs.update(refs)
            return inputs, names

        outputs = infer(loaded, build, timeout, arrival, _uint_param(request, "priority"), deadline, on_cancel)
        resp = _pb()[0].ModelInferResponse(model_name=loaded.name, model_version=loaded.version, id=request.id)
        specs = {s.name: s for s in loaded.model.outputs}
        for name, arr in outputs.items():
            out = resp.outputs.add(name=name, datatype=specs[name].datatype.name, shape=arr.shape)
            ref = out_refs.get(name)
            if ref is None:
                resp.raw_output_contents.append(to_raw(arr))
                continue
            self.shm.write(name, ref, arr)
            out.parameters["shared_memory_region"].string_param = ref.region
            out.parameters["shared_memory_byte_size"].int64_param = arr.nbytes
            if ref.offset:
                out.parameters["shared_memory_offset"].int64_param = ref.offset
            # tritonclient finds an output's bytes by its index among the outputs: keep the places
            resp.raw_output_contents.append(b"")
        return resp

    @_answer
    def ModelInfer(self, request, context):
        return self._infer(request, context)

    def ModelStreamInfer(self, request_iterator, context):
        """The stream's requests run concurrently (so they batch together) and are answered as they
        finish, matched by their id; a failed one answers with its error_message and the stream goes on."""
        service_pb2 = _pb()[0]
        answers: queue.Queue = queue.Queue()

        def one(request):
            try:
                answers.put(service_pb2.ModelStreamInferResponse(infer_response=self._infer(request, context)))
            except Exception as e:  # each request's failure is its own answer, never the stream's end
                message = str(e) if isinstance(e, ServeError) else f"internal error: {type(e).__name__}: {e}"
                answers.put(service_pb2.ModelStreamInferResponse(
                    error_message=message, infer_response=service_pb2.ModelInferResponse(id=request.id)))

        def read():
            count = 0
            try:
                for request in request_iterator:
                    self.stream_pool.submit(one, request)
                    count += 1
            finally:  # the client closed or cancelled its side: answer what was read
                answers.put(_EndOfStream(count))

        threading.Thread(target=read, name="fusegraph-grpc-stream", daemon=True).start()
        sent, total = 0, None
        while total is None or sent < total:
            item = answers.get()
            if isinstance(item, _EndOfStream):
                total = item.count
            else:
                yield item
                sent += 1

    @_answer
    def SystemSharedMemoryStatus(self, request, context):
        resp = _pb()[0].SystemSharedMemoryStatusResponse()
        for row in self.shm.status(request.name):
            resp.regions[row["name"]].CopyFrom(
                _pb()[0].SystemSharedMemoryStatusResponse.RegionStatus(**row))
        return resp

    @_answer
    def SystemSharedMemoryRegister(self, request, context):
        self.shm.register(request.name, request.key, request.offset, request.byte_size)
        return _pb()[0].SystemSharedMemoryRegisterResponse()

    @_answer
    def SystemSharedMemoryUnregister(self, request, context):
        self.shm.unregister(request.name)
        return _pb()[0].SystemSharedMemoryUnregisterResponse()

    @_answer
    def CudaSharedMemoryStatus(self, request, context):
        raise cuda_unsupported()

    @_answer
    def CudaSharedMemoryRegister(self, request, context):
        raise cuda_unsupported()

    @_answer
    def CudaSharedMemoryUnregister(self, request, context):
        raise cuda_unsupported()

    @_answer
    def RepositoryIndex(self, request, context):
        service_pb2 = _pb()[0]
        resp = service_pb2.RepositoryIndexResponse()
        for row in views.repository_index(self.repo, request.ready):
            resp.models.add(**row)
        return resp

    @_answer
    def RepositoryModelLoad(self, request, context):
        self.repo.load(request.model_name)
        return _pb()[0].RepositoryModelLoadResponse()

    @_answer
    def RepositoryModelUnload(self, request, context):
        self.repo.unload(request.model_name)
        return _pb()[0].RepositoryModelUnloadResponse()


def start_grpc_server(repo: Repository, host: str, port: int, max_message_bytes: int, workers: int,
                      shm: SharedMemoryRegistry | None = None):
    """Start serving on (host, port) (port 0 picks one); the grpc.Server and the bound port. `shm`: the
    server's shared memory regions (shared with its HTTP front end)."""
    import grpc

    service_pb2_grpc = _pb()[1]
    servicer_cls = type("GrpcInferenceServicer", (InferenceServicer, service_pb2_grpc.GRPCInferenceServiceServicer), {})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fusegraph-grpc"),
                         options=[("grpc.max_receive_message_length", max_message_bytes),
                                  ("grpc.max_send_message_length", max_message_bytes),
                                  ("grpc.so_reuseport", 0)])
    servicer = servicer_cls(repo, workers, shm or SharedMemoryRegistry())
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as e:  # grpc's way of saying the address is taken or not ours
        raise OSError(f"cannot bind the gRPC port {host}:{port}: {e}") from None
    if bound == 0:
        raise OSError(f"cannot bind the gRPC port {host}:{port}")
    server.start()
    return server, bound
