"""The ONNX converter of a custom op: a node of its domain and name becomes one instruction, its
attributes typed and checked (an error names the node and the attribute)."""

from __future__ import annotations

from ..ir.shape import TupleShape
from ..onnx.registry import converter, lookup


def register_converter(d) -> None:
    # any opset of the op's domain: `version` is the definition's, recorded in .fgx files
    if lookup(d.domain, d.name, 1) is not None:  # defined again: the converter below reads the new one
        return

    @converter(d.name, domain=d.domain, since=1)
    def convert(ctx, node, args):
        from ..ir.op import get_op_class

        d_now = get_op_class(d.op_name).definition  # the latest definition of this name
        if any(a is None for a in args):
            raise ctx.error(f"custom op {d.qualified} takes no absent (empty-named) inputs")
        unknown = sorted(set(node.attrs) - set(d_now.attributes))
        if unknown:
            raise ctx.error(f"custom op {d.qualified} has no attributes {unknown}")
        attrs = {name: node.attr(name, None) for name in d_now.attributes}
        out = ctx.add(d.op_name, *args, **attrs)
        return ctx.tuple_elems(out, len(out.shape.elements)) if isinstance(out.shape, TupleShape) else out
