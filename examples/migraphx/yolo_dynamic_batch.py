"""Detect objects with a YOLOv8 ONNX model at several batch sizes from one compile, through
MIGraphX's dynamic shapes (map_dyn_input_dims).

Written for MIGraphX; on fusegraph the import line becomes `import fusegraph.migraphx as migraphx`
and nothing else changes.

    python yolo_dynamic_batch.py yolov8n.onnx --target gpu --image-size 640 --batches 1 3 [--inputs x.npz]
"""

import argparse

import migraphx
import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="YOLOv8 .onnx file: images [N,3,S,S] -> output0 [N,4+classes,anchors]")
    parser.add_argument("--target", default="gpu")
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--max-batch", type=int, default=4)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--threshold", type=float, default=0.25)
    parser.add_argument("--inputs", help=".npz holding batch<N> arrays (default: generated images)")
    parser.add_argument("--output", help="write output0 for each batch to this .npz")
    args = parser.parse_args()

    dd = migraphx.shape.dynamic_dimension
    size = args.image_size
    batch = dd(1, args.max_batch, {1, args.max_batch})
    model = migraphx.parse_onnx(args.model, map_dyn_input_dims={"images": [batch, dd(3, 3), dd(size, size), dd(size, size)]})

    in_shape = model.get_parameter_shapes()["images"]
    print(f"images: {in_shape.type_string()} dynamic={in_shape.dynamic()} "
          + " ".join(f"[{d.min}..{d.max} {sorted(d.optimals)}]" for d in in_shape.dyn_dims()))
    model.compile(migraphx.get_target(args.target))

    inputs = np.load(args.inputs) if args.inputs else None
    outputs = {}
    for n in args.batches:
        if inputs is not None:
            images = migraphx.argument(inputs[f"batch{n}"])
        else:
            images = migraphx.generate_argument(migraphx.shape(type="float_type", lens=[n, 3, size, size]), n)
        result = model.run({"images": images})[0]
        preds = np.array(result)
        scores = preds[:, 4:, :].max(axis=1)
        print(f"batch {n}: output {result.get_shape().lens()}, "
              f"{int((scores > args.threshold).sum())} candidate boxes over {args.threshold}")
        outputs[f"batch{n}"] = preds
    if args.output:
        np.savez(args.output, **outputs)


if __name__ == "__main__":
    main()
