"""One module per command. Each defines HELP, add_arguments(parser) and run(args) -> exit code."""

from __future__ import annotations

from types import ModuleType

from . import analyze, compile, ops, params, perf, quantize_report, read, reduce, run, serve, trace, verify

COMMANDS: dict[str, ModuleType] = {"read": read, "params": params, "run": run, "verify": verify, "perf": perf,
                               "analyze": analyze, "ops": ops, "compile": compile, "trace": trace,
                               "reduce": reduce, "serve": serve, "quantize-report": quantize_report}
