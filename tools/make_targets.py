#!/usr/bin/env python3
"""Writes the built-in planning targets (src/cost/targets/*.json) from
measurements committed under bench/results/, so that `ferry plan --target
h100` prices a step with what an H100 measured, from any machine.

Each target is a calibration in the format `ferry calibrate` saves, built
from one traced training step (a 4-layer Llama, 4096 wide, batch 24 x 4096,
bf16, nothing_saveable with six activations offloaded) on an H100: every
op's median over the layers at its shape, the host<->device copies and the
zeroing from the same trace.  What that trace does not hold is taken from
the nearest committed measurement and said in the target's "about"; what
none measured is left out (priced 0 by the cost model, as for any
calibration).  Run from the repository root: python3 tools/make_targets.py
[DIR] (default src/cost/targets; tests/cli/plan_target.sh checks the
committed files are what it makes).
"""
import argparse
import json
import statistics
import sys

RESULTS = "bench/results/"
TRACE = RESULTS + "2026-11-23_NVIDIA_H100_80GB_HBM3_5dba3fc_wide_trace.json"
# the traced model
B, T, C, NH, NKV, FFN, V, L = 24, 4096, 4096, 32, 8, 11008, 32000, 4
KV = C // NH * NKV
N = B * T

# trace name -> (op kind, shape fields); backward names are "d " + these
LAYER_OPS = {
    "pre_self_attention_norm": ("rmsnorm", dict(C=C)),
    "post_self_attention_norm": ("rmsnorm", dict(C=C)),
    "final_norm": ("rmsnorm", dict(C=C)),
    "query_unrotated": ("matmul", dict(C=C, OC=C)),
    "key_unrotated": ("matmul", dict(C=C, OC=KV)),
    "value_proj": ("matmul", dict(C=C, OC=KV)),
    "out_proj": ("matmul", dict(C=C, OC=C)),
    "mlpwi_0": ("matmul", dict(C=C, OC=FFN)),
    "mlpwi_1": ("matmul", dict(C=C, OC=FFN)),
    "mlpwo": ("matmul", dict(C=FFN, OC=C)),
    "logits": ("matmul", dict(C=C, OC=V)),
    "query_proj": ("rope", dict(C=C, NH=NH)),
    "key_proj": ("rope", dict(C=KV, NH=NKV)),
    "context": ("attention", dict(C=C, NH=NH, NKV=NKV)),
    "post_self_attention_residual": ("residual", dict(n=N * C)),
    "decoder_layer_output": ("residual", dict(n=N * C)),
    "mlpwi": ("swiglu", dict(n=N * FFN)),
    "losses": ("softmax_xent", dict(V=V, Vp=V)),
    "embedding": ("encoder", dict(C=C, V=V, Vp=V)),
}
LAYER_PARAMS = {"q_proj": C * C, "k_proj": C * KV, "v_proj": C * KV, "o_proj": C * C, "gate_proj": C * FFN,
                "up_proj": C * FFN, "down_proj": FFN * C, "input_layernorm": C, "post_attention_layernorm": C}
EDGE_PARAMS = {"embed_tokens": V * C, "lm_head": V * C, "norm": C}
N_PARAMS = L * sum(LAYER_PARAMS.values()) + sum(EDGE_PARAMS.values())


def flops(kind, bwd, s):
    """ferry_op_flops (src/ops/op.c) of one call."""
    n_tok = s.get("B", 0) * s.get("T", 0)
    if kind == "matmul":
        return (4.0 if bwd else 2.0) * n_tok * s["C"] * s["OC"]
    if kind == "attention":
        pairs = s["B"] * s["NH"] * s["T"] * (s["T"] + 1) / 2.0
        return (8.0 if bwd else 4.0) * pairs * (s["C"] / s["NH"])
    if kind == "rmsnorm":
        return (10.0 if bwd else 6.0) * n_tok * s["C"]
    if kind == "rope":
        return 6.0 * n_tok * s["C"]
    if kind == "swiglu":
        return (20.0 if bwd else 12.0) * s["n"]
    if kind == "residual":
        return float(s["n"])
    if kind == "softmax_xent":
        return 5.0 * n_tok * s["Vp"]
    if kind == "adamw":
        return 12.0 * s["n"]
    if kind == "sum_squares":
        return 2.0 * s["n"]
    if kind == "encoder":
        return float(n_tok * s["C"])
    raise ValueError(kind)


def op_entry(kind, bwd, shape, seconds):
    s = dict(B=0, T=0, C=0, NH=0, OC=0, V=0, Vp=0, NKV=0, n=0)
    if kind not in ("residual", "swiglu", "adamw", "sum_squares"):
        s.update(B=B, T=T)
    s.update(shape)
    e = {"op": kind, "backward": bwd}
    e.update(s)
    e["seconds"] = seconds
    e["flops"] = flops(kind, bwd, s)
    return e


def h100_calibration():
    with open(TRACE) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ops, copies = {}, {}
    zero_rates = []
    for e in events:
        if e.get("ph") != "X":
            continue
        name, cat, prog, dur = e["name"], e["cat"], e["args"]["program"], e["dur"] * 1e-6
        if cat == "op" and prog in ("forward", "backward") and not name.startswith("recompute "):
            bwd = name.startswith("d ")
            base = name[2:] if bwd else name
            if base in LAYER_OPS:
                ops.setdefault((base, bwd), []).append(dur)
        elif cat == "op" and prog == "update":
            ops.setdefault((name, False), []).append(dur)
        elif cat == "op" and prog == "gradient norm":
            ops.setdefault(("sum_squares", False), []).append(dur)
        elif cat in ("copy to host", "copy to device") and e["args"]["bytes"] >= 1 << 20:
            d = copies.setdefault(e["args"]["bytes"], {"d2h": [], "h2d": []})
            d["d2h" if cat == "copy to host" else "h2d"].append(dur)
        elif cat == "zero" and e["args"]["bytes"] >= 1 << 20:
            zero_rates.append(e["args"]["bytes"] / dur)
    entries = []
    for (name, bwd), durs in sorted(ops.items()):
        med = statistics.median(durs)
        if name == "sum_squares":
            entries.append(op_entry("sum_squares", False, dict(n=N_PARAMS), med))
        elif name.startswith("adamw "):
            p = name[len("adamw "):]
            n = L * LAYER_PARAMS[p] if p in LAYER_PARAMS else EDGE_PARAMS[p]
            entries.append(op_entry("adamw", False, dict(n=n), med))
        elif name == "embedding" and bwd:
            continue  # measured before the linear-time kernel: below
        else:
            kind, shape = LAYER_OPS[name]
            entries.append(op_entry(kind, bwd, shape, med))
    # the embedding's gradient: the linear-time kernel (24b1b3d), GPT-2 124M
    # at 48 x 1024 (RESULTS 2026-11-26_..._24b1b3d_gpt2.txt: 0.3 ms, 127.6 GFLOP/s)
    g = dict(B=48, T=1024, C=768, V=50257, Vp=50304)
    e = op_entry("encoder", True, g, 0)
    e["seconds"] = e["flops"] / 127.6e9
    e.update(B=48, T=1024)
    entries.append(e)
    # both directions at once: 81 to 100 GB/s together against 47 to 55
    # alone (RESULTS 2026-11-23_NVIDIA_H100_80GB_HBM3.md, bench_copy)
    both = (51.0 / 45.0)
    cps = []
    for size, d in sorted(copies.items()):
        if not d["d2h"] or not d["h2d"]:
            continue
        d2h, h2d = statistics.median(d["d2h"]), statistics.median(d["h2d"])
        cps.append({"bytes": size, "d2h_s": d2h, "h2d_s": h2d, "d2h_both_s": d2h * both, "h2d_both_s": h2d * both})
    return {
        "format": "ferry calibration",
        "version": "0.1.0",
        "fingerprint": "target: NVIDIA H100 80GB HBM3, sm_90, driver 580.159.04 (bench/results, 2026-11-23)",
        "created": 1795392000,  # 2026-11-23 00:00 UTC
        "d2d_Bps": 0,
        "zero_Bps": statistics.median(zero_rates),
        # ferry's CPU AdamW was not measured on that host; PyTorch's took
        # 3.2-3.8 s for 8.03B parameters there (RESULTS 2026-11-26_NVIDIA_H100_80GB_HBM3.md)
        "adamw_floats_per_s": 8.03e9 / 3.5,
        "op_spread": 0, "others_cpu": 0, "copy_compute_slowdown": 0, "task_gap_s": 0, "step_host_s": 0,
        "in_step_factor": 0, "cxl_copy_factor": 0, "cxl_adamw_factor": 0, "cxl_nodes": [],
        "nvme_read_Bps": 0, "nvme_write_Bps": 0, "nvme_dir": "", "nvme_mode": "",
        "copies": cps, "ops": entries, "collectives": [], "collective_steps": [],
    }


def main():
    ap = argparse.ArgumentParser(description="Writes the built-in planning targets (ferry plan --target) from "
                                 "the measurements committed under bench/results/; run from the repository root.")
    ap.add_argument("dir", nargs="?", default="src/cost/targets", help="where to write NAME.json (default %(default)s)")
    out_dir = ap.parse_args().dir
    calib = h100_calibration()
    targets = {
        "h100": {
            "device": "NVIDIA H100 80GB HBM3",
            # the device arena ferry opened there: 78.10 GiB (ferry info,
            # RESULTS 2026-11-26_NVIDIA_H100_80GB_HBM3_24b1b3d_gpt2.txt)
            "device_mem": 79974 << 20,
            # its host: 125.87 GiB (ferry info there, the same file)
            "host_mem": 128891 << 20,
            "about": "ops, copies and zeroing from a traced Llama step on an H100 (commit 5dba3fc, "
                     "bench/results/2026-11-23_NVIDIA_H100_80GB_HBM3_5dba3fc_wide_trace.json); the embedding's "
                     "gradient from GPT-2 on an H100 (24b1b3d); the CPU AdamW at PyTorch's rate on that host "
                     "(ferry's not measured there); device-to-device copies and collectives not measured",
        },
        "h200": {
            "device": "NVIDIA H200",
            # 138.72 GiB (ferry info, RESULTS 2026-11-26_NVIDIA_H200_217461c_tests.txt)
            "device_mem": 142049 << 20,
            # its host: 125.87 GiB (ferry info, the same file)
            "host_mem": 128891 << 20,
            "about": "the H100's figures (the same GH100 chip and PCIe; no H200 step was traced): its memory-bound "
                     "ops run faster than priced; device memory the arena ferry opened on an H200 "
                     "(bench/results/2026-11-26_NVIDIA_H200_217461c_tests.txt)",
        },
    }
    for name, t in targets.items():
        c = dict(calib)
        if name != "h100":
            c["fingerprint"] = "target: " + t["device"] + " priced as " + calib["fingerprint"][len("target: "):]
        out = {"format": "ferry target", "name": name, "backend": "cuda", "device": t["device"],
               "device_mem": t["device_mem"], "host_mem": t["host_mem"], "about": t["about"], "calibration": c}
        with open("%s/%s.json" % (out_dir, name), "w") as f:
            json.dump(out, f, indent=1, sort_keys=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
