"""Helpers for the contrib-op tests: one com.microsoft node checked against ONNX Runtime."""

import numpy as np
from onnx import helper

from tests.util import check_vs_ort, make_model

MS = "com.microsoft"
rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def contrib_model(op_type, inputs, attrs=None, outputs=("y",), initializers=None, input_names=None, opset=17):
    """One com.microsoft node; `input_names` may hold "" for absent optional inputs, `outputs` ""
    for outputs left unrequested."""
    names = list(input_names) if input_names is not None else list(inputs) + list(initializers or {})
    node = helper.make_node(op_type, names, list(outputs), domain=MS, **(attrs or {}))
    return make_model([node], inputs, [o for o in outputs if o], initializers, opset, {MS: 1})


def contrib_check(op_type, inputs, attrs=None, outputs=("y",), initializers=None, input_names=None, **tol):
    model = contrib_model(op_type, inputs, attrs, outputs, initializers, input_names)
    return check_vs_ort(model, inputs, **tol)
