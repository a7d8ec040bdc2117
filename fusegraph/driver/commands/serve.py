"""`fusegraph serve REPO`: serve a Triton-layout model repository (or one model file) over KServe v2."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common import default_target, positive_int

HELP = "serve a model repository (or one .onnx/.fgx file) over the KServe v2 / Triton protocol"


def _port(text: str) -> int:
    value = int(text) if text.isdigit() else -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535 (0: any free port), got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("repo", metavar="REPO", type=Path,
                   help="a model repository (REPO/NAME/config.pbtxt, REPO/NAME/1/model.onnx) or one model file")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--http-port", type=_port, default=8000, metavar="PORT", help="HTTP/REST port (default 8000)")
    p.add_argument("--grpc-port", type=_port, default=8001, metavar="PORT", help="gRPC port (default 8001)")
    p.add_argument("--metrics-port", type=_port, default=8002, metavar="PORT",
                   help="Prometheus /metrics port (default 8002)")
    p.add_argument("--target", metavar="T",
                   help="target of models whose config names none (default: cpu where available, else ref)")
    p.add_argument("--load-model", action="append", metavar="NAME",
                   help="load only these models at start (repeatable; others load through the repository API)")
    p.add_argument("--isolation", choices=("process", "thread"),
                   help="model instances each in a worker process (restarted if it crashes; the default) "
                        "or as threads of the server's process")
    p.add_argument("--max-message-mb", type=positive_int, default=64, metavar="MB",
                   help="largest request or response (default 64 MiB)")


def run(args: argparse.Namespace) -> int:
    from ...serve import Server, ServerOptions
    from ..report import note

    options = ServerOptions(host=args.host, http_port=args.http_port, grpc_port=args.grpc_port,
                            metrics_port=args.metrics_port, default_target=args.target or default_target(),
                            max_message_bytes=args.max_message_mb << 20,
                            load_models=tuple(args.load_model) if args.load_model else None,
                            isolation=args.isolation)
    server = Server(args.repo, options).stop_on_signals().start()
    for row in server.repo.index():
        note(f"model {row['name']} {row['version'] or '-'}: {row['state']}{' (' + row['reason'] + ')' if row['reason'] else ''}")
    note(f"serving on {args.host}: HTTP {server.http_port}, gRPC {server.grpc_port}, metrics {server.metrics_port}")
    server.wait()
    return 0
