"""KServe v2 gRPC messages to numpy and back: a ModelInferRequest's inputs (raw, typed contents or shared
memory), its parameters, and the ModelInferResponse of the outputs. tritonclient's generated modules are
the one copy of the protos in the process."""

from __future__ import annotations

from .errors import InvalidRequestError
from .infer import check_input
from .shared_memory import SharedMemoryRegistry, ShmRef
from .tensors import from_raw, from_values, to_raw


def pb():
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    return service_pb2, service_pb2_grpc


# grpc reports a call without a deadline as one centuries away
_NO_DEADLINE_S = 1e7


def uint_param(request, key: str) -> int:
    """An integer request parameter (tritonclient sends `priority` as uint64, `timeout` as int64)."""
    if key not in request.parameters:
        return 0
    p = request.parameters[key]
    kind = p.WhichOneof("parameter_choice")
    if kind not in ("int64_param", "uint64_param") or getattr(p, kind) < 0:
        raise InvalidRequestError(f"request parameter {key!r} must be a non-negative integer, got {kind}")
    return getattr(p, kind)


def limits(request, context) -> tuple[float | None, float | None]:
    """The request's `timeout` parameter (microseconds, Triton's) and the call's deadline, in seconds."""
    timeout = uint_param(request, "timeout") / 1e6 or None
    remaining = context.time_remaining()
    return timeout, remaining if remaining is not None and remaining < _NO_DEADLINE_S else None


def shm_ref(params, what: str) -> ShmRef | None:
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
    placed = [shm_ref(t.parameters, f"input {t.name!r}") for t in request.inputs]
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
        ref = shm_ref(o.parameters, f"output {o.name!r}")
        if ref is not None:
            shm.check(o.name, ref)
            out_refs[o.name] = ref
    return inputs, [o.name for o in request.outputs], out_refs


def encode_response(loaded, request, outputs, out_refs: dict[str, ShmRef], shm: SharedMemoryRegistry):
    """The ModelInferResponse of `outputs`: raw bytes, or written to the shared memory asked for."""
    resp = pb()[0].ModelInferResponse(model_name=loaded.name, model_version=loaded.version, id=request.id)
    specs = {s.name: s for s in loaded.model.outputs}
    for name, arr in outputs.items():
        out = resp.outputs.add(name=name, datatype=specs[name].datatype.name, shape=arr.shape)
        ref = out_refs.get(name)
        if ref is None:
            resp.raw_output_contents.append(to_raw(arr))
            continue
        shm.write(name, ref, arr)
        out.parameters["shared_memory_region"].string_param = ref.region
        out.parameters["shared_memory_byte_size"].int64_param = arr.nbytes
        if ref.offset:
            out.parameters["shared_memory_offset"].int64_param = ref.offset
        # tritonclient finds an output's bytes by its index among the outputs: keep the places
        resp.raw_output_contents.append(b"")
    return resp
