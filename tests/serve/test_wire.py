"""The worker-process frames (`wire.py`) beyond test_faults' datatype round trip: a frame far larger than
the socket's buffer (written in several partial writes), frames back to back, a strided tensor."""

from __future__ import annotations

import socket
import threading

import numpy as np

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
