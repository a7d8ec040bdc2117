"""The KServe manifests in deploy/kserve: their command is `fusegraph serve` with flags the CLI accepts,
and the ports they declare are those the flags open."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="reading the KServe manifests needs pyyaml")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kserve"


def _docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((DEPLOY / name).read_text()))


def _serve_args():
    (runtime,) = _docs("servingruntime.yaml")
    (container,) = runtime["spec"]["containers"]
    assert container["command"] == ["fusegraph", "serve"]
    from fusegraph.driver.cli import build_parser

    return runtime, container, build_parser().parse_args(["serve", *container["args"]])


def test_serving_runtime_runs_the_cli_with_kserves_ports():
    runtime, container, args = _serve_args()
    assert runtime["kind"] == "ServingRuntime" and runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    assert set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    assert str(args.repo) == "/mnt/models" and args.host == "0.0.0.0"
    assert (args.http_port, args.grpc_port, args.metrics_port) == (8080, 8081, 8002)
    assert [p["containerPort"] for p in container["ports"]] == [args.http_port]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": args.http_port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": args.http_port}
    assert int(runtime["metadata"]["annotations"]["prometheus.kserve.io/port"]) == args.metrics_port


def test_inference_services_use_the_runtime_and_its_grpc_port():
    runtime, _, args = _serve_args()
    services = _docs("inferenceservice.yaml")
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert {s["kind"] for s in services} == {"InferenceService"}
    for s in services:
        model = s["spec"]["predictor"]["model"]
        assert model["runtime"] == runtime["metadata"]["name"] and model["modelFormat"]["name"] in formats
        assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
        if model["protocolVersion"] == "grpc-v2":
            assert model["ports"] == [{"name": "h2c", "containerPort": args.grpc_port, "protocol": "TCP"}]
