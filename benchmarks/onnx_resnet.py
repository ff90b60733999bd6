"""ResNet-50 through ONNX: omnitensor's importer on a backend vs onnxruntime, same run.

The model is the light ResNet-50 graph that ships inside the `onnx` wheel
(``onnx/backend/test/data/light/light_resnet50.onnx``: the real architecture, 415 nodes), whose
weights are `ConstantOfShape` nodes; they are replaced by initializers holding the constant
times a random factor in [0.5, 1.5) (seed 0), so both systems multiply real, dense weight
arrays as with a trained model. Both run that file on the same images; rounds alternate
and medians are printed with images/s and the ratio to onnxruntime, and the outputs are checked
against each other. What omnitensor runs is what users call: ``omnitensor.onnx.load(path)``
then calling the model (traced once, then the cached plan).

    python benchmarks/onnx_resnet.py [--backend cpu] [--batch 1] [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np


def _model_path(name: str) -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def with_dense_weights(path: str, out: str) -> None:
    """Save `path` with every ConstantOfShape weight turned into a dense random initializer."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    graph = model.graph
    known = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    rng = np.random.default_rng(0)
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in known:
            shape = tuple(int(d) for d in known[node.input[0]])
            value = numpy_helper.to_array(node.attribute[0].t).reshape(-1)[0]
            dense = (value * rng.uniform(0.5, 1.5, shape)).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(dense, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    onnx.save(model, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of each system (onnxruntime's intra-op pool, and "
                        "OMNITENSOR_NUM_THREADS unless set)")
    args = parser.parse_args()
    os.environ.setdefault("OMNITENSOR_NUM_THREADS", str(args.threads))
    print(f"threads: onnxruntime {args.threads}, omnitensor "
          f"{os.environ['OMNITENSOR_NUM_THREADS']}")

    import tempfile

    import onnx
    import onnxruntime as ort

    import omnitensor as ot
    from omnitensor.onnx import load

    folder = tempfile.mkdtemp(prefix="omnitensor-onnx-bench-")
    path = os.path.join(folder, f"{args.model}.onnx")
    with_dense_weights(_model_path(args.model), path)
    proto = onnx.load(path)
    inits = {i.name for i in proto.graph.initializer}
    name = next(i.name for i in proto.graph.input if i.name not in inits)
    # The light graph fixes the batch at 1: other batches are run image by image.
    rng = np.random.default_rng(0)
    images = rng.standard_normal((args.batch, 3, 224, 224)).astype(np.float32)

    ort.set_default_logger_severity(3)  # the light graph's unused shape initializers warn
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    model = load(path)

    def run_ort() -> list[Any]:
        return [session.run(None, {name: images[i:i + 1]})[0] for i in range(args.batch)]

    def run_ot() -> list[Any]:
        with ot.use_backend(args.backend):
            return [model(images[i:i + 1])[0].numpy() for i in range(args.batch)]

    start = time.perf_counter()
    first = run_ot()
    print(f"omnitensor first call (trace + compile + run): {time.perf_counter() - start:.2f} s")
    reference = run_ort()
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(first, reference, strict=True))
    top = [int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(first, reference, strict=True)]
    print(f"max |omnitensor - onnxruntime| = {diff:.3g}; same top-1 class: {all(top)}")

    times: dict[str, list[float]] = {"onnxruntime": [], f"omnitensor-{args.backend}": []}
    for _ in range(args.rounds):
        for label, fn in ((f"omnitensor-{args.backend}", run_ot), ("onnxruntime", run_ort)):
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    base = statistics.median(times["onnxruntime"])
    print(f"{'system':20} {'median s':>10} {'images/s':>10} {'x onnxruntime':>14}")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:20} {median:10.4f} {args.batch / median:10.2f} {base / median:14.2f}")


if __name__ == "__main__":
    main()
