"""Classify images with a ResNet-50 ONNX model through MIGraphX's Python API.

Written for MIGraphX; on fusegraph the import line becomes `import fusegraph.migraphx as migraphx`
and nothing else changes.

    python resnet50_classify.py resnet50.onnx --target gpu --batch 2 [--fp16] [--input images.npy]
"""

import argparse

import migraphx
import numpy as np


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="ResNet-50 .onnx file (input NCHW float32, output logits)")
    parser.add_argument("--target", default="gpu", help="ref, cpu or gpu")
    parser.add_argument("--batch", type=int, default=1, help="batch size for the symbolic batch dim")
    parser.add_argument("--fp16", action="store_true", help="quantize to fp16 before compiling")
    parser.add_argument("--input", help=".npy of NCHW float32 images (default: generated data)")
    parser.add_argument("--save", help="save the compiled program here, then run the loaded copy")
    parser.add_argument("--output", help="write the logits to this .npy")
    args = parser.parse_args()

    model = migraphx.parse_onnx(args.model, default_dim_value=args.batch)
    name = model.get_parameter_names()[0]
    in_shape = model.get_parameter_shapes()[name]
    print(f"input {name}: {in_shape.type_string()} {in_shape.lens()} ({in_shape.elements()} elements, "
          f"{in_shape.bytes()} bytes)")

    if args.fp16:
        migraphx.quantize_fp16(model)
    model.compile(migraphx.get_target(args.target), offload_copy=True, fast_math=True)
    print(f"compiled: {model.is_compiled()}, outputs {[s.lens() for s in model.get_output_shapes()]}")

    if args.save:
        migraphx.save(model, args.save)
        model = migraphx.load(args.save)

    if args.input:
        images = migraphx.argument(np.load(args.input))
    else:
        images = migraphx.generate_argument(in_shape, 0)
    results = model.run({name: images})

    out = results[0]
    print(f"output: {out.get_shape().type_string()} {out.get_shape().lens()}")
    logits = np.array(out)
    for n, p in enumerate(softmax(logits)):
        top5 = np.argsort(p)[::-1][:5]
        print(f"image {n}: " + ", ".join(f"class {c} ({p[c]:.3f})" for c in top5))
    if args.output:
        np.save(args.output, logits)


if __name__ == "__main__":
    main()
