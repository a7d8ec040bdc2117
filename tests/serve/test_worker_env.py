"""The environment a worker process starts with: its thread counts, the server's own settings (an
OpenMP wait policy), and the fusegraph it must import first."""

from __future__ import annotations

from pathlib import Path

import fusegraph
from fusegraph.serve.process import WorkerProcess


def _env(monkeypatch, **server_env):
    for k, v in server_env.items():
        monkeypatch.setenv(k, v)
    return WorkerProcess({"name": "m"}, 0, None, 3)._env()


def test_worker_threads_and_import_path(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = _env(monkeypatch, OMP_NUM_THREADS="7")
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "3"  # the instance's share, not the server's
    assert "OMP_WAIT_POLICY" not in env  # OpenMP's own default
    assert env["PYTHONPATH"].split(":")[0] == str(Path(fusegraph.__file__).resolve().parents[1])


def test_the_servers_wait_policy_reaches_the_workers(monkeypatch):
    assert _env(monkeypatch, OMP_WAIT_POLICY="PASSIVE")["OMP_WAIT_POLICY"] == "PASSIVE"
