"""KServe v2 over HTTP/REST, JSON and the binary tensor extension, on the standard library's threading
HTTP server (HTTP/1.1 keep-alive, as tritonclient's HTTP client uses it).

Binary extension: a body whose JSON header is `Inference-Header-Content-Length` bytes long, followed by
the inputs' bytes in the order of the inputs that carry `parameters.binary_data_size`; outputs asked for
with `binary_data` come back the same way.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import numpy as np

from . import views
from .errors import InvalidRequestError, ServeError
from .infer import check_input, infer
from .repository import Repository
from .shared_memory import SharedMemoryRegistry, ShmRef, cuda_unsupported
from .tensors import from_raw, from_values, to_raw

HEADER_LENGTH = "Inference-Header-Content-Length"
_MODEL = r"/v2/models/(?P<name>[^/]+)(?:/versions/(?P<version>[^/]+))?"
_REGION = r"/v2/systemsharedmemory/region/(?P<name>[^/]+)"


def _field(obj: dict, key: str, kind: type, what: str, default=None):
    value = obj.get(key, default)
    if value is None and default is None:
        raise InvalidRequestError(f"{what} lacks {key!r}")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidRequestError(f"{what}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def shm_ref(params: dict, what: str) -> ShmRef | None:
    """The shared memory placement in a tensor's parameters (`shared_memory_region`, ..._byte_size,
    ..._offset), or None."""
    if "shared_memory_region" not in params:
        return None
    return ShmRef(_field(params, "shared_memory_region", str, what),
                  _field(params, "shared_memory_byte_size", int, what),
                  _field(params, "shared_memory_offset", int, what, 0))


def decode_infer(loaded, header: dict, binary: memoryview, shm: SharedMemoryRegistry | None = None):
    """The inputs of a JSON infer request (data inline, binary, or in shared memory: `shm`'s regions)."""
    if not isinstance(header, dict):
        raise InvalidRequestError("an infer request must be a JSON object")
    inputs, offset = {}, 0
    for k, t in enumerate(_field(header, "inputs", list, "the request")):
        what = f"inputs[{k}]"
        if not isinstance(t, dict):
            raise InvalidRequestError(f"{what} must be an object")
        name = _field(t, "name", str, what)
        shape = _field(t, "shape", list, what)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise InvalidRequestError(f"input {name!r}: shape {shape} must be a list of non-negative integers")
        if name in inputs:
            raise InvalidRequestError(f"input {name!r} given more than once")
        dt = check_input(loaded, name, _field(t, "datatype", str, what), shape)
        params = _field(t, "parameters", dict, what, {})
        ref = shm_ref(params, f"input {name!r} parameters")
        if ref is not None:
            inputs[name] = (shm or SharedMemoryRegistry()).read(name, dt, shape, ref)
        elif "binary_data_size" in params:
            size = _field(params, "binary_data_size", int, f"input {name!r} parameters")
            if size < 0 or offset + size > len(binary):
                raise InvalidRequestError(f"input {name!r}: binary_data_size {size} runs past the "
                                          f"{len(binary) - offset} bytes of binary data left")
            inputs[name] = from_raw(name, dt, shape, binary[offset:offset + size])
            offset += size
        elif "data" in t:
            inputs[name] = from_values(name, dt, shape, t["data"])
        else:
            raise InvalidRequestError(f"input {name!r} has neither data nor parameters.binary_data_size")
    if offset != len(binary):
        raise InvalidRequestError(f"{len(binary) - offset} bytes of binary data follow the inputs unused")
    return inputs


def requested_outputs(header: dict, shm: SharedMemoryRegistry) -> tuple[list[tuple[str, bool]], dict[str, ShmRef]]:
    """The outputs asked for, [(name, binary?)], and those of them to be written to shared memory."""
    default_binary = bool(_field(header, "parameters", dict, "the request", {}).get("binary_data_output", False))
    out, refs = [], {}
    for k, o in enumerate(_field(header, "outputs", list, "the request", [])):
        if not isinstance(o, dict):
            raise InvalidRequestError(f"outputs[{k}] must be an object")
        params = _field(o, "parameters", dict, f"outputs[{k}]", {})
        name = _field(o, "name", str, f"outputs[{k}]")
        out.append((name, bool(params.get("binary_data", default_binary))))
        ref = shm_ref(params, f"output {name!r} parameters")
        if ref is not None:
            shm.check(name, ref)
            refs[name] = ref
    return out, refs


def encode_infer(loaded, outputs: dict[str, np.ndarray], binary: dict[str, bool], request_id,
                 shm: SharedMemoryRegistry | None = None, refs: dict[str, ShmRef] | None = None
                 ) -> tuple[bytes, int | None]:
    specs = {s.name: s for s in loaded.model.outputs}
    tensors, blobs = [], []
    for name, arr in outputs.items():
        t = {"name": name, "datatype": specs[name].datatype.name, "shape": list(arr.shape)}
        ref = (refs or {}).get(name)
        if ref is not None:
            shm.write(name, ref, arr)
            t["parameters"] = {"shared_memory_region": ref.region, "shared_memory_byte_size": arr.nbytes,
                               **({"shared_memory_offset": ref.offset} if ref.offset else {})}
        elif binary[name]:
            blob = to_raw(arr)
            t["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:  # JSON numbers: float16 and bfloat16 through float32, which holds them exactly
            flat = arr.reshape(-1)
            t["data"] = (flat.astype(np.float32) if t["datatype"] in ("FP16", "BF16") else flat).tolist()
        tensors.append(t)
    body = {"model_name": loaded.name, "model_version": loaded.version, "outputs": tensors}
    if request_id:
        body["id"] = request_id
    head = json.dumps(body).encode()
    return (head + b"".join(blobs), len(head)) if blobs else (head, None)


class _HttpServer(ThreadingHTTPServer):
    """Counts the requests in flight, so that a graceful stop can wait for them (the handler threads of
    idle keep-alive connections are not waited for: they hold no request)."""

    daemon_threads = True
    # socketserver's listen backlog is 5: a burst of new connections past it waits out SYN retransmits
    # (1 s, then 3 s) before the server sees it
    request_queue_size = 1024

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_flight = 0
        self._draining = False
        self._cv = threading.Condition()

    def begin_request(self) -> bool:
        with self._cv:
            if self._draining:
                return False
            self._in_flight += 1
            return True

    def end_request(self) -> None:
        with self._cv:
            self._in_flight -= 1
            self._cv.notify_all()

    def drain(self, grace_s: float) -> None:
        """Stop accepting, answer new requests on open connections 503, wait for those in flight."""
        with self._cv:
            self._draining = True
        self.shutdown()
        with self._cv:
            self._cv.wait_for(lambda: self._in_flight == 0, grace_s)
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fusegraph"
    timeout = 120  # seconds an idle keep-alive connection holds its thread
    disable_nagle_algorithm = True  # headers and body are separate writes: Nagle + delayed ACK cost 40 ms
    repo: Repository          # set on the subclass made per server
    shm: SharedMemoryRegistry
    max_body: int

    def log_message(self, format, *args):  # quiet: the metrics and statistics say what happened
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json", header_len: int | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if header_len is not None:
            self.send_header(HEADER_LENGTH, str(header_len))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj, status: int = 200):
        self._send(status, json.dumps(obj).encode())

    def _error(self, status: int, message: str):
        self._json({"error": message}, status)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "chunked request bodies are not accepted: send Content-Length")
        if self.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise _HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                             f"Content-Encoding {self.headers['Content-Encoding']!r} is not supported")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "Content-Length is not an integer") from None
        if length < 0 or length > self.max_body:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             f"request body of {length} bytes exceeds the limit of {self.max_body}")
        return self.rfile.read(length)

    def _dispatch(self, method: str):
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        if not self.server.begin_request():
            self.close_connection = True
            return self._error(503, "the server is shutting down")
        try:
            for m, pattern, handler in ROUTES:
                match = pattern.fullmatch(path)
                if match and m == method:
                    args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    return handler(self, **args)
            if any(p.fullmatch(path) for _, p, _ in ROUTES):
                raise _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {path}")
            raise _HttpError(HTTPStatus.NOT_FOUND, f"no endpoint {path}")
        except _HttpError as e:
            self._error(e.status, e.message)
        except ServeError as e:
            self._error(e.http_status, str(e))
        except Exception as e:  # a bug: the client still gets an answer naming it
            self._error(500, f"internal error: {type(e).__name__}: {e}")
        finally:
            self.server.end_request()

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    # -- endpoints ----------------------------------------------------------------------------------
    def live(self):
        self._send(200, b"")

    def ready(self):
        self._send(200 if self.repo.all_ready() else 400, b"")

    def server_metadata(self):
        self._json(views.server_metadata())

    def model_metadata(self, name, version=""):
        self._json(views.model_metadata(self.repo.get(name, version)))

    def model_ready(self, name, version=""):
        try:
            self.repo.get(name, version)
        except ServeError:
            return self._send(400, b"")
        self._send(200, b"")

    def model_config(self, name, version=""):
        self._json(views.message_to_json(self.repo.get(name, version).model.config))

    def model_stats(self, name="", version=""):
        self._json(views.statistics(self.repo, name, version))

    def index(self):
        body = self._body().strip()
        try:
            request = json.loads(body) if body else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidRequestError(f"the index request's JSON is malformed: {e}") from None
        if not isinstance(request, dict):
            raise InvalidRequestError("an index request must be a JSON object")
        self._json(views.repository_index(self.repo, bool(request.get("ready", False))))

    def load(self, name):
        self._body()
        self.repo.load(name)
        self._send(200, b"")

    def unload(self, name):
        self._body()
        self.repo.unload(name)
        self._send(200, b"")

    def model_infer(self, name, version=""):
        arrival = time.monotonic_ns()
        body = self._body()
        loaded = self.repo.get(name, version)
        header_len = self.headers.get(HEADER_LENGTH)
        try:
            hl = len(body) if header_len is None else int(header_len)
        except ValueError:
            raise InvalidRequestError(f"{HEADER_LENGTH} {header_len!r} is not an integer") from None
        if not 0 <= hl <= len(body):
            raise InvalidRequestError(f"{HEADER_LENGTH} {hl} is outside the body's {len(body)} bytes")
        try:
            header = json.loads(body[:hl])
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidRequestError(f"the request's JSON is malformed: {e}") from None
        wanted: list[tuple[str, bool]] = []
        refs: dict[str, ShmRef] = {}

        def build():
            inputs = decode_infer(loaded, header, memoryview(body)[hl:], self.shm)
            names, placed = requested_outputs(header, self.shm)
            wanted.extend(names)
            refs.update(placed)
            return inputs, [n for n, _ in wanted]

        params = header.get("parameters", {}) if isinstance(header, dict) else {}
        params = params if isinstance(params, dict) else {}  # decode_infer names a non-object
        timeout = _field(params, "timeout", int, "the request parameters", 0)
        priority = _field(params, "priority", int, "the request parameters", 0)
        if timeout < 0 or priority < 0:
            raise InvalidRequestError(f"request parameters timeout {timeout} and priority {priority} must be >= 0")
        outputs = infer(loaded, build, timeout / 1e6 or None, arrival, priority)
        default_binary = bool(params.get("binary_data_output", False))
        binary = {n: default_binary for n in outputs} | dict(wanted)
        data, head_len = encode_infer(loaded, outputs, binary, header.get("id"), self.shm, refs)
        self._send(200, data, "application/octet-stream" if head_len is not None else "application/json", head_len)


    # -- system shared memory (Triton's extension) ---------------------------------------------------
    def shm_status(self, name=""):
        self._json(self.shm.status(name))

    def shm_register(self, name):
        body = self._body()
        try:
            request = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise InvalidRequestError(f"the register request's JSON is malformed: {e}") from None
        if not isinstance(request, dict):
            raise InvalidRequestError("a register request must be a JSON object")
        what = f"shared memory region {name!r}"
        self.shm.register(name, _field(request, "key", str, what), _field(request, "offset", int, what, 0),
                          _field(request, "byte_size", int, what))
        self._send(200, b"")

    def shm_unregister(self, name=""):
        self._body()
        self.shm.unregister(name)
        self._send(200, b"")

    def cuda_shm(self, name=""):
        self._body()
        raise cuda_unsupported()


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = int(status), message


ROUTES = [(m, re.compile(p), h) for m, p, h in [
    ("GET", r"/v2/health/live", _Handler.live),
    ("GET", r"/v2/health/ready", _Handler.ready),
    ("GET", r"/v2", _Handler.server_metadata),
    ("GET", r"/v2/models/stats", _Handler.model_stats),
    ("GET", _MODEL, _Handler.model_metadata),
    ("GET", _MODEL + r"/ready", _Handler.model_ready),
    ("GET", _MODEL + r"/config", _Handler.model_config),
    ("GET", _MODEL + r"/stats", _Handler.model_stats),
    ("POST", _MODEL + r"/infer", _Handler.model_infer),
    ("POST", r"/v2/repository/index", _Handler.index),
    ("POST", r"/v2/repository/models/(?P<name>[^/]+)/load", _Handler.load),
    ("POST", r"/v2/repository/models/(?P<name>[^/]+)/unload", _Handler.unload),
    ("GET", r"/v2/systemsharedmemory/status", _Handler.shm_status),
    ("GET", _REGION + r"/status", _Handler.shm_status),
    ("POST", _REGION + r"/register", _Handler.shm_register),
    ("POST", _REGION + r"/unregister", _Handler.shm_unregister),
    ("POST", r"/v2/systemsharedmemory/unregister", _Handler.shm_unregister),
    ("GET", r"/v2/cudasharedmemory(?:/region/(?P<name>[^/]+))?/status", _Handler.cuda_shm),
    ("POST", r"/v2/cudasharedmemory(?:/region/(?P<name>[^/]+))?/(?:register|unregister)", _Handler.cuda_shm),
]]


def start_http_server(repo: Repository, host: str, port: int, max_body: int, shm: SharedMemoryRegistry | None = None):
    """Serve on (host, port) (port 0 picks one) from a daemon thread; the server (its server_port is bound).
    `shm`: the server's shared memory regions (shared with its gRPC front end)."""
    handler = type("Handler", (_Handler,), {"repo": repo, "max_body": max_body, "shm": shm or SharedMemoryRegistry()})
    try:
        server = _HttpServer((host, port), handler)
    except OSError as e:
        raise OSError(f"cannot bind the HTTP port {host}:{port}: {e.strerror or e}") from None
    threading.Thread(target=server.serve_forever, name="fusegraph-http", daemon=True).start()
    return server
