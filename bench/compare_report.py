#!/usr/bin/env python3
"""The report of scripts/bench --compare: reads what the runs left in the
results directory, prints the table (scripts/bench tees it to compare.txt)
and writes the CSV.

    bench/compare_report.py RESULTS_DIR CSV "CONCURRENCIES" ROUNDS OLD_LABEL
                            [NEW_LABEL [OLD_STEPS NEW_STEPS]]

Per side (old: the commit compared with; new: this tree) and concurrency C,
RESULTS_DIR holds saga-bench's summary of each round (SIDE-cC-rR.json), of
all rounds at once (SIDE-cC.json: the latencies), the WAL of each round
("records fpi bytes", SIDE-cC-rR.wal, as bench/report.py reads it) and the
CPU samples before and after it (SIDE-cC-rR.cpu0/.cpu1: "svc NAME ticks"
and "pg PID ticks" lines). sagas/s of a round is its finished sagas over its
span (the first start to the last end), as bench/report.py counts it; a
side's figure is the median of its rounds, and new/old the ratio of the two
medians. CPU per saga: the set's services, and the PostgreSQL backends
connected to its database (both sides' backends run the same server), over
the rounds' finished sagas. With the steps of each side's saga (scripts/bench
--compare sagas), the same per step: the whole machine's CPU per saga
(backends and services) over the saga's steps, and new/old of that.
"""
import json, os, sys

out, csv_path = sys.argv[1], sys.argv[2]
concs = [int(c) for c in sys.argv[3].split()]
rounds, old_label = int(sys.argv[4]), sys.argv[5]
new_label = sys.argv[6] if len(sys.argv) > 6 else "this tree"
steps = (int(sys.argv[7]), int(sys.argv[8])) if len(sys.argv) > 8 else None
HZ = os.sysconf("SC_CLK_TCK")
SIDES = ("old", "new")


def load(path):
    with open(path) as f:
        return json.load(f)


def median(v):
    v = sorted(v)
    if not v:
        return float("nan")
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def cpu(path):
    """{("svc", name) or ("pg", pid): ticks} of one sample"""
    d = {}
    for line in open(path):
        p = line.split()
        if len(p) == 3:
            d[(p[0], p[1])] = int(p[2])
    return d


def side(name, c):
    parts, rates, wal_bytes, pg_ticks, svc_ticks, orch_ticks = [], [], 0, 0, 0, 0
    refused = 0
    for r in range(1, rounds + 1):
        base = f"{out}/{name}-c{c}-r{r}"
        j = load(base + ".json")
        parts.append(j)
        span = j.get("span_s") or 0
        rates.append(j["terminal"] / span if span else 0.0)
        refused += j.get("post", {}).get("refused_429", 0)
        for line in open(base + ".wal"):
            if len(line.split()) == 3:
                wal_bytes += int(line.split()[2])
        a, b = cpu(base + ".cpu0"), cpu(base + ".cpu1")
        for k, v in b.items():
            # a backend born during the round counts from zero
            d = v - a.get(k, 0)
            if k[0] == "pg":
                pg_ticks += d
            else:
                svc_ticks += d
                if k[1] == "orchestrator":
                    orch_ticks += d
    n = sum(p["terminal"] for p in parts)
    e = load(f"{out}/{name}-c{c}.json")["e2e_ms"]
    ms = lambda t: 1000.0 * t / HZ / n if n else float("nan")
    return dict(sagas_per_s=median(rates), rounds=rates, sagas=n,
                completed=sum(p.get("outcomes", {}).get("Completed", 0) for p in parts),
                refused_429=refused, p50_ms=e["p50"], p99_ms=e["p99"],
                wal_bytes_per_saga=wal_bytes / n if n else float("nan"),
                pg_cpu_ms_per_saga=ms(pg_ticks), svc_cpu_ms_per_saga=ms(svc_ticks),
                orchestrator_cpu_ms_per_saga=ms(orch_ticks))


print(open(f"{out}/env.txt").read())
rows = []
for c in concs:
    o, n = side("old", c), side("new", c)
    rows.append(dict(concurrency=c, o=o, n=n,
                     ratio=n["sagas_per_s"] / o["sagas_per_s"] if o["sagas_per_s"] else 0.0))

print(f"old: {old_label}; new: {new_label}. sagas/s: median of {rounds} rounds; "
      "p50/p99 end to end over all rounds")
print("%5s %9s %9s %7s %13s %13s %11s %11s %11s %11s" % (
    "conc", "old/s", "new/s", "new/old", "old p50/p99", "new p50/p99",
    "WAL B o/n", "pg ms o/n", "svc ms o/n", "orch ms o/n"))
for r in rows:
    o, n = r["o"], r["n"]
    print("%5d %9.1f %9.1f %6.1f%% %6.1f/%-6.1f %6.1f/%-6.1f %5.0f/%-5.0f %5.2f/%-5.2f %5.2f/%-5.2f"
          " %5.2f/%-5.2f" % (
              r["concurrency"], o["sagas_per_s"], n["sagas_per_s"], 100 * r["ratio"],
              o["p50_ms"], o["p99_ms"], n["p50_ms"], n["p99_ms"],
              o["wal_bytes_per_saga"], n["wal_bytes_per_saga"],
              o["pg_cpu_ms_per_saga"], n["pg_cpu_ms_per_saga"],
              o["svc_cpu_ms_per_saga"], n["svc_cpu_ms_per_saga"],
              o["orchestrator_cpu_ms_per_saga"], n["orchestrator_cpu_ms_per_saga"]))
print()
print("each round's sagas/s (in the order run: odd rounds old first, even rounds new first):")
for r in rows:
    print("%5d  old %s" % (r["concurrency"], " ".join("%.1f" % x for x in r["o"]["rounds"])))
    print("%5s  new %s" % ("", " ".join("%.1f" % x for x in r["n"]["rounds"])))
for r in rows:
    for name in SIDES:
        s = r["o" if name == "old" else "n"]
        if s["refused_429"] or s["completed"] != s["sagas"]:
            print("note: concurrency %d, %s: %d refused (429), %d of %d sagas completed" % (
                r["concurrency"], name, s["refused_429"], s["completed"], s["sagas"]))
print("(WAL B: bytes per saga; pg ms: CPU of the backends of the side's database per saga; "
      "svc ms: the set's services'; orch ms: the orchestrator's)")
if steps:
    print()
    print("per step: CPU (backends and services) per saga over its steps, %s %d, %s %d" % (
        old_label, steps[0], new_label, steps[1]))
    print("and the steps new has more: the difference of the two sagas' CPU over them")
    print("%5s %12s %12s %8s %12s %8s %15s" % ("conc", "old ms/step", "new ms/step", "new/old",
                                             "added/step", "add/old", "steps/s o/n"))
    for r in rows:
        o, n = r["o"], r["n"]
        to = o["pg_cpu_ms_per_saga"] + o["svc_cpu_ms_per_saga"]
        tn = n["pg_cpu_ms_per_saga"] + n["svc_cpu_ms_per_saga"]
        po, pn = to / steps[0], tn / steps[1]
        added = (tn - to) / (steps[1] - steps[0]) if steps[1] != steps[0] else float("nan")
        print("%5d %12.3f %12.3f %7.1f%% %12.3f %7.1f%% %7.0f/%-7.0f" % (
            r["concurrency"], po, pn, 100 * pn / po if po else 0.0, added,
            100 * added / po if po else 0.0,
            o["sagas_per_s"] * steps[0], n["sagas_per_s"] * steps[1]))

cols = ["concurrency", "old_sagas_per_s", "new_sagas_per_s", "new_to_old",
        "old_p50_ms", "old_p99_ms", "new_p50_ms", "new_p99_ms",
        "old_wal_bytes_per_saga", "new_wal_bytes_per_saga",
        "old_pg_cpu_ms_per_saga", "new_pg_cpu_ms_per_saga",
        "old_svc_cpu_ms_per_saga", "new_svc_cpu_ms_per_saga",
        "old_orchestrator_cpu_ms_per_saga", "new_orchestrator_cpu_ms_per_saga",
        "old_sagas", "new_sagas", "rounds", "old_commit"]
with open(csv_path, "w") as f:
    f.write(",".join(cols) + "\n")
    for r in rows:
        v = {"concurrency": r["concurrency"], "new_to_old": r["ratio"], "rounds": rounds,
             "old_commit": old_label}
        for name in SIDES:
            s = r["o" if name == "old" else "n"]
            for k in ("sagas_per_s", "p50_ms", "p99_ms", "wal_bytes_per_saga",
                      "pg_cpu_ms_per_saga", "svc_cpu_ms_per_saga",
                      "orchestrator_cpu_ms_per_saga", "sagas"):
                v[f"{name}_{k}"] = s[k]
        f.write(",".join(f"{v[k]:.3f}" if isinstance(v[k], float) else str(v[k])
                         for k in cols) + "\n")
