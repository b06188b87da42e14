"""What ONNX Runtime's int8 (dynamic quantization, as the onnxruntime backend applies it) does to accuracy: digits
few-shot (issue 53).

A tiny model is trained with the torch backend on digits 0-4 (the transfer protocol's upstream, SGD steps on the
torch backend's `train`); its pre-logits features are exported to ONNX exactly as the onnxruntime backend exports
a model (the dynamo exporter, the backend's opset, batch axis dynamic) and quantised by the backend's own
`quantize`; then the paper's linear few-shot evaluation (vitbench.protocols.fewshot.evaluate_features: whitened
features, closed-form ridge, the l2 chosen on val) runs on digits 5-9 with the features of torch eager, ONNX
Runtime fp32 and ONNX Runtime int8, the same draws for all three. The change is measured and reported, not
bounded: int8 computes another function.

    python benchmarks/int8_fewshot.py                      # ViT-Nano/4 at 16 px, 300 steps, 1/5/10 shots
    python benchmarks/int8_fewshot.py --model R-Nano --resolution 32
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-Nano/4")
    ap.add_argument("--resolution", type=int, default=16)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--shots", default="1,5,10")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()

    import onnxruntime as ort
    import torch

    from vitbench.backends.base import get_backend
    from vitbench.backends.onnxruntime.backend import OPSET, quantize
    from vitbench.models.specs import get_spec
    from vitbench.models.torch import feature_forward
    from vitbench.protocols.fewshot import evaluate_features
    from vitbench.transfer.data import load_splits
    from vitbench.transfer.schedules import OptimConfig

    torch.set_num_threads(1)
    spec, res = get_spec(args.model), args.resolution
    be = get_backend("torch")
    be.setup("cpu", threads=1)
    up = load_splits({"name": "digits", "classes": "0-4"})
    model = be.init_model(spec, res, up.num_classes, seed=0)
    model, losses = be.train(model, up.train, res, OptimConfig(optimizer="sgd", lr=0.03, steps=args.steps,
                                                               warmup_steps=10), 64, seed=0)
    model.eval()

    class Features(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return feature_forward(self.m, x)

    down = load_splits({"name": "digits", "classes": "5-9"})
    shots = [int(s) for s in args.shots.split(",")]
    with tempfile.TemporaryDirectory() as d:
        fp32, int8 = Path(d) / "f.onnx", Path(d) / "f.int8.onnx"
        with torch.no_grad():
            torch.onnx.export(Features(model).eval(), (torch.zeros(2, 3, res, res),), str(fp32),
                              input_names=["images"],
                              dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=2**20)},),
                              opset_version=OPSET, external_data=False, verbose=False)
        quantize(fp32, int8)
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sessions = {p: ort.InferenceSession(str(f), so, providers=["CPUExecutionProvider"])
                    for p, f in (("onnxruntime fp32", fp32), ("onnxruntime int8", int8))}

        def feats(split, who):
            out, labels = [], []
            for x, y, _ in split.batches(res, 256):  # NHWC float32
                nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
                if who == "torch eager":
                    with torch.no_grad():
                        f = feature_forward(model, torch.from_numpy(nchw)).numpy()
                else:
                    f = sessions[who].run(None, {"images": nchw})[0]
                out.append(np.asarray(f, np.float64))
                labels.append(y)
            return np.concatenate(out), np.concatenate(labels)

        results = {}
        for who in ("torch eager", "onnxruntime fp32", "onnxruntime int8"):
            tr, va, te = feats(down.train, who), feats(down.val, who), feats(down.test, who)
            metrics, raw = evaluate_features(tr, va, te, down.num_classes, shots, args.seeds)
            results[who] = {k: v for k, v in metrics.items() if k.startswith("accuracy")}
            results[who]["features_max_abs"] = float(np.abs(te[0]).max())
            if who != "torch eager":
                ref = feats(down.test, "torch eager")[0]
                results[who]["features_rel_diff_vs_torch"] = float(np.abs(te[0] - ref).max() / np.abs(ref).max())
    print(json.dumps({"model": spec.name, "resolution": res, "upstream_steps": args.steps,
                      "upstream_final_loss": losses[-1], "shots": shots, "seeds": args.seeds,
                      "results": results}, indent=1))
    print(f"\n{'':18}" + "".join(f"{k:>10}-shot" for k in shots))
    for who, r in results.items():
        print(f"{who:18}" + "".join(f"{r[f'accuracy_{k}shot']:15.4f}" for k in shots))
    for k in shots:
        d = results["onnxruntime int8"][f"accuracy_{k}shot"] - results["onnxruntime fp32"][f"accuracy_{k}shot"]
        print(f"int8 - fp32, {k}-shot: {d:+.4f}")


if __name__ == "__main__":
    main()
