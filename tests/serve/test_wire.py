"""The worker-process frames (`wire.py`) beyond test_faults' datatype round trip: a frame far larger than
the socket's buffer (written in several partial writes), frames back to back, a strided tensor, and
inputs placed in the shared arena (`arena.py`)."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from fusegraph.serve import wire


def test_frames_round_trip_through_a_socket_pair():
    rng = np.random.default_rng(0)
    tensors = {"big": rng.standard_normal((3, 512, 1024)).astype(np.float32),  # 6 MiB
               "empty": np.zeros((0, 4), np.float16),
               "strided": np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]}
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        sender = threading.Thread(target=lambda: [wire.send(a, {"op": "run", "n": k}, tensors) for k in range(2)])
        sender.start()
        for k in range(2):  # the second frame starts right where the first ended
            header, got = wire.recv(b)
            assert header == {"op": "run", "n": k}
            assert list(got) == list(tensors)
            for name, want in tensors.items():
                assert got[name].dtype == want.dtype and got[name].shape == want.shape
                np.testing.assert_array_equal(got[name], want)
        sender.join()


def test_inputs_gathered_into_the_arena_travel_as_offsets_and_arrive_as_views_of_it():
    from fusegraph.serve.arena import Arena

    rng = np.random.default_rng(1)
    parts = {"x": [rng.standard_normal((k, 3, 5)).astype(np.float32) for k in (1, 2)],
             "flag": [np.array([[True]]), np.array([[False], [True]])]}
    server = Arena.create()
    worker = Arena(server.fd)  # the worker maps the same memfd (passed to it at start)
    server.map(4096)
    gathered = server.gather(parts)
    for name, arrays in parts.items():
        np.testing.assert_array_equal(gathered[name], np.concatenate(arrays))
        assert server.offset_of(gathered[name]) is not None
    gathered["late"] = np.arange(6, dtype=np.int64)  # memory of its own: its bytes go over the socket
    a, b = socket.socketpair()
    with a, b:
        wire.send(a, {"op": "run"}, gathered, server)
        header, got = wire.recv(b, worker)
        assert header == {"op": "run"} and worker.size == 4096
        for name, want in gathered.items():
            np.testing.assert_array_equal(got[name], want)
        assert worker.offset_of(got["x"]) is not None and worker.offset_of(got["late"]) is None
        got["x"][0, 0, 0] = 42.0  # one memory: what the worker sees is what the server wrote
        assert gathered["x"][0, 0, 0] == 42.0
        server.map(64)  # a batch too large for the arena is concatenated on its own and sent as bytes
        big = server.gather({"x": parts["x"]})
        assert server.offset_of(big["x"]) is None
        wire.send(a, {"op": "run"}, big, server)
        np.testing.assert_array_equal(wire.recv(b, worker)[1]["x"], np.concatenate(parts["x"]))
    worker._bytes = None
    server.close()


def test_a_frame_naming_arena_offsets_out_of_its_bounds_is_refused():
    from fusegraph.serve.arena import Arena

    arena = Arena.create()
    arena.map(128)
    a, b = socket.socketpair()
    with a, b:
        head = b'{"op": "run", "arena": 128, "tensors": [["x", "FP32", [64], 0]]}'
        a.sendall(len(head).to_bytes(8, "little") + head)
        with pytest.raises(ConnectionError, match="outside the 128-byte arena"):
            wire.recv(b, arena)
    arena.close()
