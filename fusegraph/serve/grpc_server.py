"""KServe v2 over gRPC: `inference.GRPCInferenceService` on grpc's asyncio server, with tritonclient's
generated modules (the one copy of the protos in the process). Errors are answered with their status
code and message.

One event loop, on a thread of its own, runs every call: a request is decoded and queued on the loop,
and the loop is woken once more when its answer comes (the scheduler's thread hands it over). The
synchronous server took each call from grpc's polling thread to a pool thread, which then slept on the
answer: two more thread switches per request, the larger part of the server's own CPU per request
(docs/serving.md has the figures). What may block for long (loading a model) runs on a thread.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from dataclasses import dataclass

from . import views
from .errors import ServeError
from .grpc_codec import decode_request, encode_response, limits, pb, uint_param
from .infer import infer_async
from .repository import Repository
from .shared_memory import SharedMemoryRegistry, ShmRef, cuda_unsupported


def _error_status(e: Exception):
    """The status code and message a failed call answers with: a ServeError's own, else INTERNAL naming
    the bug (the client still gets an answer, never a hang)."""
    import grpc

    if isinstance(e, ServeError):
        return getattr(grpc.StatusCode, e.grpc_code), str(e)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}"


def _answer(method):
    """Turn a failure into the protocol's status (a cancelled call stays cancelled)."""

    @functools.wraps(method)
    async def wrapper(self, request, context):
        try:
            return await method(self, request, context)
        except Exception as e:
            await context.abort(*_error_status(e))

    return wrapper


@dataclass(frozen=True)
class _EndOfStream:
    count: int  # requests read from the stream


class InferenceServicer:
    """The servicer methods; `GrpcServer` mixes them into the generated base class."""

    def __init__(self, repo: Repository, shm: SharedMemoryRegistry):
        self.repo, self.shm = repo, shm

    @_answer
    async def ServerLive(self, request, context):
        return pb()[0].ServerLiveResponse(live=True)

    @_answer
    async def ServerReady(self, request, context):
        return pb()[0].ServerReadyResponse(ready=self.repo.all_ready())

    @_answer
    async def ServerMetadata(self, request, context):
        return pb()[0].ServerMetadataResponse(**views.server_metadata())

    @_answer
    async def ModelReady(self, request, context):
        try:
            self.repo.get(request.name, request.version)
        except ServeError:
            return pb()[0].ModelReadyResponse(ready=False)
        return pb()[0].ModelReadyResponse(ready=True)

    @_answer
    async def ModelMetadata(self, request, context):
        from google.protobuf import json_format

        meta = views.model_metadata(self.repo.get(request.name, request.version))
        return json_format.ParseDict(meta, pb()[0].ModelMetadataResponse())

    @_answer
    async def ModelConfig(self, request, context):
        return pb()[0].ModelConfigResponse(config=self.repo.get(request.name, request.version).model.config)

    @_answer
    async def ModelStatistics(self, request, context):
        from google.protobuf import json_format

        stats = views.statistics(self.repo, request.name, request.version)
        return json_format.ParseDict(stats, pb()[0].ModelStatisticsResponse())

    async def _infer(self, request, context):
        arrival = time.monotonic_ns()
        loaded = self.repo.get(request.model_name, request.model_version)
        timeout, deadline = limits(request, context)
        out_refs: dict[str, ShmRef] = {}

        def build():
            inputs, names, refs = decode_request(loaded, request, self.shm)
            out_refs.update(refs)
            return inputs, names

        # a client that cancels the call cancels this task: infer_async drops the request if still queued
        outputs = await infer_async(loaded, build, timeout, arrival, uint_param(request, "priority"), deadline)
        return encode_response(loaded, request, outputs, out_refs, self.shm)

    @_answer
    async def ModelInfer(self, request, context):
        return await self._infer(request, context)

    async def ModelStreamInfer(self, request_iterator, context):
        """The stream's requests run concurrently (so they batch together) and are answered as they
        finish, matched by their id; a failed one answers with its error_message and the stream goes on."""
        service_pb2 = pb()[0]
        answers: asyncio.Queue = asyncio.Queue()
        running: set[asyncio.Task] = set()

        async def one(request):
            try:
                answers.put_nowait(service_pb2.ModelStreamInferResponse(infer_response=await self._infer(request, context)))
            except Exception as e:  # each request's failure is its own answer, never the stream's end
                answers.put_nowait(service_pb2.ModelStreamInferResponse(
                    error_message=_error_status(e)[1], infer_response=service_pb2.ModelInferResponse(id=request.id)))

        async def read():
            count = 0
            try:
                async for request in request_iterator:
                    task = asyncio.create_task(one(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    count += 1
            finally:  # the client closed or cancelled its side: answer what was read
                answers.put_nowait(_EndOfStream(count))

        reader = asyncio.create_task(read())
        sent, total = 0, None
        try:
            while total is None or sent < total:
                item = await answers.get()
                if isinstance(item, _EndOfStream):
                    total = item.count
                else:
                    yield item
                    sent += 1
        finally:  # the call ended early (cancelled): its requests still queued are dropped
            reader.cancel()
            for task in list(running):
                task.cancel()

    @_answer
    async def SystemSharedMemoryStatus(self, request, context):
        resp = pb()[0].SystemSharedMemoryStatusResponse()
        for row in self.shm.status(request.name):
            resp.regions[row["name"]].CopyFrom(pb()[0].SystemSharedMemoryStatusResponse.RegionStatus(**row))
        return resp

    @_answer
    async def SystemSharedMemoryRegister(self, request, context):
        self.shm.register(request.name, request.key, request.offset, request.byte_size)
        return pb()[0].SystemSharedMemoryRegisterResponse()

    @_answer
    async def SystemSharedMemoryUnregister(self, request, context):
        self.shm.unregister(request.name)
        return pb()[0].SystemSharedMemoryUnregisterResponse()

    @_answer
    async def CudaSharedMemoryStatus(self, request, context):
        raise cuda_unsupported()

    @_answer
    async def CudaSharedMemoryRegister(self, request, context):
        raise cuda_unsupported()

    @_answer
    async def CudaSharedMemoryUnregister(self, request, context):
        raise cuda_unsupported()

    @_answer
    async def RepositoryIndex(self, request, context):
        resp = pb()[0].RepositoryIndexResponse()
        for row in views.repository_index(self.repo, request.ready):
            resp.models.add(**row)
        return resp

    @_answer
    async def RepositoryModelLoad(self, request, context):
        await asyncio.to_thread(self.repo.load, request.model_name)  # compiles: never on the loop
        return pb()[0].RepositoryModelLoadResponse()

    @_answer
    async def RepositoryModelUnload(self, request, context):
        await asyncio.to_thread(self.repo.unload, request.model_name)  # drains the model's queue
        return pb()[0].RepositoryModelUnloadResponse()


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (less of the loop's own Python per wakeup), else asyncio's."""
    try:
        import uvloop
    except ModuleNotFoundError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class GrpcServer:
    """grpc's asyncio server on an event loop of its own thread, started and stopped from any thread."""

    def __init__(self, repo: Repository, host: str, port: int, max_message_bytes: int,
                 shm: SharedMemoryRegistry | None = None):
        self.loop = _new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fusegraph-grpc", daemon=True)
        self._thread.start()
        try:
            self.server, self.port = asyncio.run_coroutine_threadsafe(
                self._start(repo, host, port, max_message_bytes, shm or SharedMemoryRegistry()), self.loop).result()
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise

    async def _start(self, repo, host, port, max_message_bytes, shm):
        import grpc

        service_pb2_grpc = pb()[1]
        servicer_cls = type("GrpcInferenceServicer", (InferenceServicer, service_pb2_grpc.GRPCInferenceServiceServicer), {})
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_message_bytes),
                                          ("grpc.max_send_message_length", max_message_bytes),
                                          ("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer_cls(repo, shm), server)
        try:
            bound = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as e:  # grpc's way of saying the address is taken or not ours
            raise OSError(f"cannot bind the gRPC port {host}:{port}: {e}") from None
        if bound == 0:
            raise OSError(f"cannot bind the gRPC port {host}:{port}")
        await server.start()
        return server, bound

    def stop(self, grace_s: float) -> threading.Event:
        """Refuse new calls, give those in flight `grace_s` to finish; the event is set once stopped."""
        done = threading.Event()

        async def stop() -> None:
            try:
                await self.server.stop(grace_s)
            finally:
                done.set()
                self.loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self.loop)
        return done


def start_grpc_server(repo: Repository, host: str, port: int, max_message_bytes: int,
                      shm: SharedMemoryRegistry | None = None) -> tuple[GrpcServer, int]:
    """Start serving on (host, port) (port 0 picks one); the server and the bound port. `shm`: the
    server's shared memory regions (shared with its HTTP front end)."""
    server = GrpcServer(repo, host, port, max_message_bytes, shm)
    return server, server.port
