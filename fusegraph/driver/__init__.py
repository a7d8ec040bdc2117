"""The `fusegraph` command-line driver: read, params, run, verify, perf.

`cli.main` builds the parser; each command lives in `commands/<name>.py` with `add_arguments` and
`run`. Heavy imports (rich, onnxruntime, the model zoo) happen inside the commands, when used.
"""
