#!/usr/bin/env python3
"""The report of scripts/bench --overload: reads saga-bench's JSON summaries
(overload-capacity.json, overload-before-F.json, overload-after-F.json for
F in 1.5, 2.5, 4; the wake-up figures of each in overload-NAME-wake.json)
and the orchestrator's peak RSS of each run (*.rss, kB)
from the results directory; prints the table, writes the CSV and the
gnuplot input (overload.dat: "factor completed/s e2e-p99-ms" lines, one
block for before, one for after).

    bench/overload_report.py RESULTS_DIR CSV

"before" ran with ADMISSION_MAX_INFLIGHT=0 (every start accepted), "after"
with the default, adaptive limit. completed/s is the sagas that reached
Completed over the run's span (first start to last end), as saga-bench
counts them; the wake-up column is the time from PaymentSucceeded's commit
at payment to the orchestrator's handler (p50).
"""
import json, os, sys

out, csv_path = sys.argv[1], sys.argv[2]
FACTORS = ("1.5", "2.5", "4")


def load(name):
    with open(os.path.join(out, f"overload-{name}.json")) as f:
        j = json.load(f)
    wake = os.path.join(out, f"overload-{name}-wake.json")
    if os.path.exists(wake):
        with open(wake) as f:
            j["wake_ms"] = json.load(f).get("wake_ms", {})
    rss = os.path.join(out, f"overload-{name}.rss")
    j["rss_mib"] = int(open(rss).read().split()[0]) / 1024 if os.path.exists(rss) else float("nan")
    j["refusal_server_p99_ms"] = server_p99(os.path.join(out, f"overload-{name}.metrics"))
    return j


def server_p99(path):
    """The orchestrator's own refusal p99 (saga_admission_refusal_seconds, its
    /metrics after the run): the upper bound of the bucket that holds it, ms."""
    if not os.path.exists(path):
        return float("nan")
    buckets, count = [], 0
    for line in open(path):
        if line.startswith("saga_admission_refusal_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), int(float(line.split()[-1]))))
        elif line.startswith("saga_admission_refusal_seconds_count"):
            count = int(float(line.split()[-1]))
    for le, n in sorted(buckets):
        if count and n >= 0.99 * count:
            return le * 1000
    return float("nan")


def row(name, factor, j, cap):
    post = j.get("post", {})
    span = j.get("span_s") or float("nan")
    completed = j.get("outcomes", {}).get("Completed", 0)
    wake = j.get("wake_ms", {}).get("PaymentSucceeded", {}).get("commit_to_handler_p50")
    return {
        "run": name, "factor": factor,
        "sent": post.get("sent", 0),
        "accepted": post.get("created_201", 0),
        "refused": post.get("refused_429", 0),
        "unanswered": post.get("failed", 0),
        "completed_per_s": completed / span if span == span and span > 0 else float("nan"),
        "share_of_capacity": (completed / span / cap) if cap and span == span and span > 0 else float("nan"),
        "step_timeouts": j.get("step_timeouts", 0),
        "e2e_p50_ms": j.get("e2e_ms", {}).get("p50", float("nan")),
        "e2e_p99_ms": j.get("e2e_ms", {}).get("p99", float("nan")),
        "refusal_p99_ms": post.get("refused_ms", {}).get("p99", float("nan")),
        "refusal_server_p99_ms": j["refusal_server_p99_ms"],
        "post_p99_ms": post.get("p99", float("nan")),
        "rss_mib": j["rss_mib"],
        "wake_paid_p50_ms": wake if wake is not None else float("nan"),
    }


def num(v):
    return float("nan") if v is None else v


capj = load("capacity")
cap = capj.get("sagas_per_s") or 0
rows = []
for f in FACTORS:
    for kind in ("before", "after"):
        try:
            j = load(f"{kind}-{f}")
        except FileNotFoundError:
            continue
        rows.append(row(kind, float(f), j, cap))

cols = list(rows[0].keys()) if rows else []
with open(csv_path, "w") as fo:
    fo.write(",".join(cols) + "\n")
    for r in rows:
        fo.write(",".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in cols) + "\n")
with open(os.path.join(out, "overload.dat"), "w") as fo:
    for kind in ("before", "after"):
        fo.write(f"# {kind}\n")
        for r in rows:
            if r["run"] == kind:
                fo.write(f"{r['factor']} {r['completed_per_s']:.2f} {num(r['e2e_p99_ms']):.1f}\n")
        fo.write("\n\n")

print("closed loop: %.1f sagas/s, e2e p50 %.1f ms, p99 %.1f ms, orchestrator peak RSS %.1f MiB"
      % (cap, num(capj.get("e2e_ms", {}).get("p50")), num(capj.get("e2e_ms", {}).get("p99")),
         capj["rss_mib"]))
hdr = ("run", "x", "accepted", "refused", "compl/s", "of cap", "StepTO", "e2e p50", "e2e p99",
       "429 p99", "429 srv", "RSS MiB", "wake ms")
print("%-6s %4s %9s %9s %8s %7s %7s %9s %9s %8s %8s %8s %8s" % hdr)
for r in rows:
    print("%-6s %4.1f %9d %9d %8.1f %6.0f%% %7d %9.1f %9.1f %8.2f %8.1f %8.1f %8.1f" % (
        r["run"], r["factor"], r["accepted"], r["refused"], r["completed_per_s"],
        100 * r["share_of_capacity"], r["step_timeouts"], num(r["e2e_p50_ms"]),
        num(r["e2e_p99_ms"]), num(r["refusal_p99_ms"]), num(r["refusal_server_p99_ms"]),
        r["rss_mib"], r["wake_paid_p50_ms"]))
print("(429 p99: a refusal's p99 at the client, ms; 429 srv: inside the orchestrator, the "
      "upper bound of its histogram bucket)")
