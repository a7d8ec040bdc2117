"""Run a BERT encoder (transformers-style ONNX export) through MIGraphX's Python API.

Written for MIGraphX; on fusegraph the import line becomes `import fusegraph.migraphx as migraphx`
and nothing else changes. The model is parsed from bytes (parse_onnx_buffer), its three int64
inputs fixed to [batch, sequence] with map_input_dims.

    python bert.py bert.onnx --target gpu --batch 1 --seq 128 [--inputs feeds.npz] [--output out.npz]
"""

import argparse

import migraphx
import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="BERT .onnx file with inputs " + ", ".join(INPUTS))
    parser.add_argument("--target", default="gpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--inputs", help=".npz holding the three inputs (default: generated token ids)")
    parser.add_argument("--save", help="save the compiled program here (json format), then run the loaded copy")
    parser.add_argument("--output", help="write the outputs to this .npz, by output index")
    args = parser.parse_args()

    dims = [args.batch, args.seq]
    with open(args.model, "rb") as f:
        model = migraphx.parse_onnx_buffer(f.read(), map_input_dims={k: dims for k in INPUTS})
    for name, s in model.get_parameter_shapes().items():
        print(f"{name}: {s.type_string()} {s.lens()} strides {s.strides()} standard={s.standard()}")

    model.compile(migraphx.get_target(args.target))
    if args.save:
        migraphx.save(model, args.save, format="json")
        model = migraphx.load(args.save, format="json")

    shapes = model.get_parameter_shapes()
    if args.inputs:
        feeds = np.load(args.inputs)
        params = {k: migraphx.argument(feeds[k]) for k in INPUTS}
    else:
        params = {
            "input_ids": migraphx.generate_argument(shapes["input_ids"], 1),
            "attention_mask": migraphx.fill_argument(shapes["attention_mask"], 1),
            "token_type_ids": migraphx.fill_argument(shapes["token_type_ids"], 0),
        }
    results = model.run(params)

    for k, r in enumerate(results):
        print(f"output {k}: {r.get_shape().type_string()} {r.get_shape().lens()}")
    pooled = results[-1].tolist()
    print("pooler_output[:4]:", [round(v, 4) for v in pooled[:4]])
    if args.output:
        np.savez(args.output, **{str(k): np.array(r) for k, r in enumerate(results)})


if __name__ == "__main__":
    main()
