#!/usr/bin/env python3
"""bench/llama8b.sh's bookkeeping (standard library only).

usage: python3 bench/llama8b_report.py COMMAND ARGS...

  shard PATH VOCAB N        N random tokens below VOCAB as a token shard
                            (llm.c's header, version 2: uint32 tokens)
  plan PLAN_JSON            "FITS DEVICE_PEAK HOST_TOTAL" of a `ferry plan --json`
  ferry NAME RC PLAN_JSON TRAIN_JSON TRACE LOG RSS RATE
                            one JSON line for a ferry run: the median step
                            (the first left out), tokens/s, model FLOP/s
                            against RATE, device peak against the plan's,
                            host RSS peak, and from the traced step the
                            CPU AdamW's time the compute stream did not hide
  note NAME STATUS REASON [PLAN_JSON]
                            one JSON line for a run not made (skipped,
                            failed), with the plan's peaks when given
  table JSONL               the summary table of every run's line

The model FLOPs of a ferry run are ferry's own ("MFU: X GFLOP per step" in
its log, from ferry_model_step_flops); bench/llama8b_torch.py counts the
same way.
"""
import array
import json
import random
import re
import statistics
import struct
import sys


def shard(path, vocab, n):
    header = [0] * 256
    header[:3] = [20240520, 2, int(n)]
    rng = random.Random(1337)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(array.array("I", (rng.randrange(int(vocab)) for _ in range(int(n)))).tobytes())


def load_plan(path):
    with open(path) as f:
        plan = json.load(f)
    return plan.get("plan", plan)  # --policy auto: {"auto": ..., "plan": ...}


def plan_line(path):
    p = load_plan(path)
    print(int(bool(p.get("fits", True))), p["device"]["peak_bytes"], p["host"]["total_bytes"])


def union_ms(spans):
    """Total length of the union of (start, end) spans, in the trace's µs, as ms."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total / 1e3


def trace_figures(path):
    """From a ferry trace: the compute stream's idle time over the step, and
    the CPU AdamW's time while the compute stream was idle (exposed)."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return {}
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    spans = {}
    for e in events:
        if e.get("ph") == "X":
            spans.setdefault(names.get(e["tid"], str(e["tid"])), []).append((e["ts"], e["ts"] + e["dur"]))
    every = [x for v in spans.values() for x in v]
    if not every:
        return {}
    span = (max(e for _, e in every) - min(s for s, _ in every)) / 1e3
    compute, opt = spans.get("compute", []), spans.get("cpu optimizer", [])
    out = {"traced_step_ms": round(span, 1), "compute_idle_ms": round(span - union_ms(compute), 1)}
    if opt:
        out["cpu_adamw_ms"] = round(union_ms(opt), 1)
        out["exposed_optimizer_ms"] = round(union_ms(opt + compute) - union_ms(compute), 1)
    return out


def ferry_record(name, rc, plan_path, train_path, trace, log, rss, rate):
    rec = {"impl": "ferry " + name, "rc": int(rc), "host_rss_peak_bytes": int(rss) if rss else None}
    p = None
    try:
        p = load_plan(plan_path)
        rec.update(plan_device_peak_bytes=p["device"]["peak_bytes"], plan_host_bytes=p["host"]["total_bytes"],
                   policy=p.get("policy"), place=p.get("place"))
    except (OSError, ValueError, KeyError):
        pass
    with open(log, errors="replace") as f:
        text = f.read()
    m = re.search(r"MFU: ([0-9.]+) GFLOP per step", text)
    if m:
        rec["model_flops_per_step"] = float(m.group(1)) * 1e9
    steps = []
    try:
        with open(train_path) as f:
            steps = [json.loads(line) for line in f if line.startswith('{"step"')]
    except (OSError, ValueError):
        pass
    # stopped at the time limit after some steps: their figures still count
    rec["status"] = "ok" if int(rc) == 0 and steps else "partial" if steps else "failed"
    if rec["status"] != "ok":
        errors = [line for line in text.splitlines() if "error" in line.lower() or "ferry" in line.lower()]
        rec["reason"] = (errors[-1] if errors else f"exit {rc}, no steps")[:300]
    if steps:
        ms = [s["step_ms"] for s in steps]
        med = statistics.median(ms[1:] or ms)
        rec.update(step_ms=[round(x, 1) for x in ms], median_ms=round(med, 1),
                   loss=[round(s["loss"], 4) for s in steps],
                   tokens_per_s=round(p["batch"] * p["seq"] / med * 1e3, 1) if p else None,
                   gpu_peak_bytes=max(s["device_peak_bytes"] for s in steps))
        if "model_flops_per_step" in rec:
            rec["model_flops_per_s"] = rec["model_flops_per_step"] / med * 1e3
            if float(rate) > 0:
                rec["matmul_flops_per_s"] = float(rate)
                rec["vs_matmul"] = round(rec["model_flops_per_s"] / float(rate), 4)
    rec.update(trace_figures(trace))
    print(json.dumps(rec))


def note(name, status, reason, plan_path=None):
    rec = {"impl": name, "status": status, "reason": reason}
    if plan_path:
        p = load_plan(plan_path)
        rec.update(plan_device_peak_bytes=p["device"]["peak_bytes"], plan_host_bytes=p["host"]["total_bytes"])
    print(json.dumps(rec))


def gib(x):
    return f"{x / (1 << 30):.1f}" if isinstance(x, (int, float)) else "-"


def table(path):
    with open(path) as f:
        recs = [json.loads(line) for line in f if line.startswith("{")]
    for r in recs:
        if r.get("impl") == "matmul" and r.get("status") == "ok":
            n = r["matmul_size"]
            print(f"bf16 {n}x{n}x{n} product (this run): {r['matmul_flops_per_s'] / 1e12:.4g} TFLOP/s")
    head = ("run", "status", "ms/step", "tokens/s", "TFLOP/s", "vs mm", "dev GiB", "plan", "host GiB", "plan",
            "opt exp ms", "idle ms")
    recs = [r for r in recs if r.get("impl") != "matmul"]
    for r in recs:
        if not str(r.get("impl")).startswith("ferry"):
            r["impl"] = f"torch {r.get('impl')}"
    w = max([len(head[0])] + [len(str(r.get("impl"))) for r in recs])
    fmt = "%-" + str(w) + "s %-8s %9s %9s %8s %6s %8s %6s %8s %6s %10s %8s"
    print(fmt % head)
    for r in recs:
        flops = r.get("model_flops_per_s")
        ran = r.get("status") in ("ok", "partial")
        print(fmt % (
            r.get("impl"), r.get("status"), r.get("median_ms", "-"), r.get("tokens_per_s", "-"),
            f"{flops / 1e12:.3g}" if flops else "-", r.get("vs_matmul", "-"), gib(r.get("gpu_peak_bytes")),
            gib(r.get("plan_device_peak_bytes")), gib(r.get("host_rss_peak_bytes") if ran else None),
            gib(r.get("plan_host_bytes", r.get("host_need_bytes"))),
            r.get("exposed_optimizer_ms", "-"),
            r.get("compute_idle_ms", "-")))
        if r.get("reason"):
            print(f"    {r['reason']}")
    best = {}
    for r in recs:
        if r.get("status") in ("ok", "partial") and r.get("median_ms"):
            side = r["impl"].split()[0]
            if side not in best or r["median_ms"] < best[side]["median_ms"]:
                best[side] = r
    if len(best) == 2:
        f, t = best["ferry"], best["torch"]
        print(f"fastest ferry ({f['impl']}) against fastest PyTorch ({t['impl']}): "
              f"{t['median_ms'] / f['median_ms']:.2f}x the tokens/s")


def main(argv):
    cmds = {"shard": (shard, 3), "plan": (plan_line, 1), "ferry": (ferry_record, 8), "note": (note, 3),
            "table": (table, 1)}
    if not argv or argv[0] not in cmds or len(argv) - 1 not in (cmds[argv[0]][1], 4 if argv[0] == "note" else -1):
        print(__doc__, file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    fn, _ = cmds[argv[0]]
    fn(*argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
