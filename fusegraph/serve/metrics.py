"""Prometheus metrics under Triton's names, labelled model and version, read from each model's statistics
at scrape time (one record of every fact: the ModelStats the statistics endpoints also answer from).

Triton exposes these as counters without the `_total` suffix that prometheus_client's counter families
add; dashboards query Triton's exact names, so they are exposed as untyped samples of those names.
"""

from __future__ import annotations

from .repository import Repository

# name -> (help, the value read from a ModelStats snapshot)
_METRICS = {
    "nv_inference_request_success": ("Number of successful inference requests, all batch sizes",
                                     lambda s: s["success"].count),
    "nv_inference_request_failure": ("Number of failed inference requests, all batch sizes",
                                     lambda s: s["fail"].count),
    "nv_inference_count": ("Number of inferences performed (a request of batch N counts N)",
                           lambda s: s["inference_count"]),
    "nv_inference_exec_count": ("Number of model executions (batches) performed", lambda s: s["execution_count"]),
    "nv_inference_request_duration_us": ("Cumulative inference request duration in microseconds",
                                         lambda s: s["success"].ns // 1000),
    "nv_inference_queue_duration_us": ("Cumulative inference queuing duration in microseconds",
                                       lambda s: s["queue"].ns // 1000),
    "nv_inference_compute_infer_duration_us": ("Cumulative compute inference duration in microseconds",
                                               lambda s: s["compute_infer"].ns // 1000),
}


class ModelMetricsCollector:
    def __init__(self, repo: Repository):
        self.repo = repo

    def collect(self):
        from prometheus_client.core import Metric

        snaps = [(m.name, m.version, m.stats.snapshot()) for m in self.repo.loaded()]
        for name, (help_text, read) in _METRICS.items():
            family = Metric(name, help_text, "unknown")
            for model, version, s in snaps:
                family.add_sample(name, {"model": model, "version": version}, read(s))
            yield family


def start_metrics_server(repo: Repository, host: str, port: int):
    """Serve /metrics on (host, port) in a daemon thread; the (server, thread) pair, port 0 picks one."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ModelMetricsCollector(repo))
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise OSError(f"cannot bind the metrics port {host}:{port}: {e.strerror or e}") from None
