#!/usr/bin/env python3
"""The report of scripts/bench: reads what the runs left in the results
directory and prints the table (scripts/bench tees it to table.txt), writes
the CSV and the gnuplot input (plot.dat, one block per series).

    bench/report.py RESULTS_DIR CSV "CONCURRENCIES" ROUNDS

RESULTS_DIR holds, per series and concurrency, saga-bench's JSON summaries
(pgsaga-cC[-rR].json, amqp-..., amqp-cluster-..., tls-...), pgbench's output and per-transaction logs
(ceiling-cC-rR.txt, ceiling/cC-rR*, notify-..., minimal-...), the WAL of each
run ("records fpi bytes" lines, *.wal), the tls series' TLS handshake
counters before and after each run (tls-cC-rR.hs), env.txt, rss.txt, the wake-up runs,
the WAL phase (wal-*.wal) and the failover trials (failover.txt: "trial node
seconds-to-another-node seconds-to-first-completed seconds-to-rejoin
queues-it-led" lines). docs/performance.md explains the figures.
"""
import glob, json, os, re, sys
out, csv_path, concs = sys.argv[1], sys.argv[2], [int(c) for c in sys.argv[3].split()]

rounds = int(sys.argv[4])

def pct(v, p):
    v = sorted(v)
    return v[max(0, -(-len(v) * p // 100) - 1)] if v else float("nan")

def wal(path):
    # one line "records fpi bytes" per run in the file: their sums
    if not os.path.exists(path):
        return (0, 0, 0)
    v = [[int(x) for x in line.split()] for line in open(path) if len(line.split()) == 3]
    return tuple(sum(x[i] for x in v) for i in range(3))

def per(w, n):
    return (w[2] / n, w[1] / n) if n else (float("nan"), float("nan"))

def pgbench(name, c):
    # pooled over the rounds: transactions over time, latencies from the logs
    n = secs = 0.0
    w = [0, 0, 0]
    for r in range(1, rounds + 1):
        text = open(f"{out}/{name}-c{c}-r{r}.txt").read()
        k = int(re.search(r"actually processed: ([0-9]+)", text).group(1))
        m = re.search(r"tps = ([0-9.]+) \(without initial", text)
        if m is None:
            # no transaction at all: pgbench prints no tps line
            print("report: %s at concurrency %d, round %d: pgbench finished no transaction"
                  " in its run (on a busy machine, connecting its clients may take it all:"
                  " try a longer --duration)" % (name, c, r), file=sys.stderr)
        tps = float(m.group(1)) if m else 0.0
        n += k
        secs += k / tps if tps else 0
        w = [a + b for a, b in zip(w, wal(f"{out}/{name}-c{c}-r{r}.wal"))]
    lat = []
    for f in glob.glob(f"{out}/{name}/c{c}-r*"):
        for line in open(f):
            p = line.split()
            if len(p) >= 3:
                lat.append(int(p[2]) / 1000.0)
    return (n / secs if secs else 0.0), pct(lat, 50), pct(lat, 99), per(w, n)

def median(v):
    v = sorted(x for x in v if x is not None)
    return v[len(v) // 2] if v else float("nan")

print(open(f"{out}/env.txt").read())
rows = []
for c in concs:
    s = json.load(open(f"{out}/pgsaga-c{c}.json"))   # all rounds pooled
    parts = [json.load(open(f"{out}/pgsaga-c{c}-r{r}.json")) for r in range(1, rounds + 1)]
    span = sum(p["span_s"] or 0 for p in parts)
    tput = sum(p["terminal"] for p in parts) / span if span else 0.0
    ct, c50, c99, cw = pgbench("ceiling", c)
    nt, n50, n99, _ = pgbench("notify", c)
    mt, m50, m99, mw = pgbench("minimal", c)
    w = [0, 0, 0]
    for r in range(1, rounds + 1):
        w = [a + b for a, b in zip(w, wal(f"{out}/pgsaga-c{c}-r{r}.wal"))]
    pw = per(w, sum(p["terminal"] for p in parts))
    e = s["e2e_ms"]
    a = {}
    if os.path.exists(f"{out}/amqp-c{c}.json"):
        ap = [json.load(open(f"{out}/amqp-c{c}-r{r}.json")) for r in range(1, rounds + 1)]
        aspan = sum(p["span_s"] or 0 for p in ap)
        ae = json.load(open(f"{out}/amqp-c{c}.json"))["e2e_ms"]
        aw = [0, 0, 0]
        for r in range(1, rounds + 1):
            aw = [x + y for x, y in zip(aw, wal(f"{out}/amqp-c{c}-r{r}.wal"))]
        apw = per(aw, sum(p["terminal"] for p in ap))
        at = sum(p["terminal"] for p in ap) / aspan if aspan else 0.0
        a = dict(amqp_sagas_per_s=at, amqp_p50_ms=ae["p50"], amqp_p99_ms=ae["p99"],
                 amqp_to_http=at / tput if tput else 0.0,
                 amqp_wal_bytes_per_saga=apw[0])
        if os.path.exists(f"{out}/amqp-cluster-c{c}.json"):
            kp = [json.load(open(f"{out}/amqp-cluster-c{c}-r{r}.json"))
                  for r in range(1, rounds + 1)]
            kspan = sum(p["span_s"] or 0 for p in kp)
            ke = json.load(open(f"{out}/amqp-cluster-c{c}.json"))["e2e_ms"]
            kt = sum(p["terminal"] for p in kp) / kspan if kspan else 0.0
            a.update(amqp_cluster_sagas_per_s=kt, amqp_cluster_p50_ms=ke["p50"],
                     amqp_cluster_p99_ms=ke["p99"],
                     amqp_cluster_to_amqp=kt / at if at else 0.0)
    if os.path.exists(f"{out}/tls-c{c}.json"):
        tp = [json.load(open(f"{out}/tls-c{c}-r{r}.json")) for r in range(1, rounds + 1)]
        tspan = sum(p["span_s"] or 0 for p in tp)
        te = json.load(open(f"{out}/tls-c{c}.json"))["e2e_ms"]
        tn = sum(p["terminal"] for p in tp)
        tt = tn / tspan if tspan else 0.0
        # handshakes during the runs: after - before (lines: before,
        # [half-way,] after); the server side less the later scrapes' own
        # connections, one to each of the three services per scrape
        hs = [0, 0, 0, 0]
        half = 0   # the second halves': both sides, all full or resumed
        for r in range(1, rounds + 1):
            v = [[int(x) for x in line.split()] for line in open(f"{out}/tls-c{c}-r{r}.hs")]
            hs = [h + y - x for h, x, y in zip(hs, v[0], v[-1])]
            hs[2] -= 3 * (len(v) - 1)
            if len(v) == 3 and half is not None:
                half += sum(y - x for x, y in zip(v[1], v[2])) - 3
            else:
                half = None
        a.update(tls_sagas_per_s=tt, tls_p50_ms=te["p50"], tls_p99_ms=te["p99"],
                 tls_to_plain=tt / tput if tput else 0.0,
                 tls_post_p50_ms=median(p["post"]["p50"] for p in tp),
                 tls_client_full_per_saga=hs[0] / tn if tn else float("nan"),
                 tls_client_resumed_per_saga=hs[1] / tn if tn else float("nan"),
                 tls_server_full_per_saga=hs[2] / tn if tn else float("nan"),
                 tls_server_resumed_per_saga=hs[3] / tn if tn else float("nan"),
                 tls_second_half_handshakes=half if half is not None else float("nan"))
    rows.append(dict(
        concurrency=c, sagas_per_s=tput, ceiling_sagas_per_s=ct,
        ratio=tput / ct if ct else 0.0,
        p50_ms=e["p50"], p99_ms=e["p99"], p95_ms=e["p95"], max_ms=e["max"],
        post_p50_ms=median(p["post"]["p50"] for p in parts),
        post_p99_ms=median(p["post"]["p99"] for p in parts),
        ceiling_p50_ms=c50, ceiling_p99_ms=c99,
        notify_sagas_per_s=nt, notify_p50_ms=n50, notify_p99_ms=n99,
        sagas=s["sagas"], completed=s["outcomes"].get("Completed", 0),
        minimal_sagas_per_s=mt, ratio_to_minimal=tput / mt if mt else 0.0,
        minimal_p50_ms=m50, minimal_p99_ms=m99,
        wal_bytes_per_saga=pw[0], fpi_per_saga=pw[1],
        ceiling_wal_bytes_per_saga=cw[0], ceiling_fpi_per_saga=cw[1],
        minimal_wal_bytes_per_saga=mw[0], minimal_fpi_per_saga=mw[1], **a))
cols = list(rows[0].keys())
with open(csv_path, "w") as f:
    f.write(",".join(cols) + "\n")
    for r in rows:
        f.write(",".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k])
                         for k in cols) + "\n")
# gnuplot input: one block per series
with open(f"{out}/plot.dat", "w") as f:
    for key, tput, p99 in (("pgsaga", "sagas_per_s", "p99_ms"),
                           ("ceiling", "ceiling_sagas_per_s", "ceiling_p99_ms"),
                           ("notify", "notify_sagas_per_s", "notify_p99_ms"),
                           ("minimal", "minimal_sagas_per_s", "minimal_p99_ms"),
                           ("amqp", "amqp_sagas_per_s", "amqp_p99_ms"),
                           ("tls", "tls_sagas_per_s", "tls_p99_ms"),
                           ("amqp-cluster", "amqp_cluster_sagas_per_s",
                            "amqp_cluster_p99_ms")):
        f.write(f"# {key}\n")
        for r in rows:
            if tput not in r:
                continue
            f.write(f"{r[tput]:.2f} {r[p99]:.3f} {r['concurrency']}\n")
        f.write("\n\n")

hdr = ("conc", "sagas/s", "p50 ms", "p99 ms", "ceiling/s", "ceil p50 ms",
       "notify/s", "ratio", "minimal/s", "min p50 ms", "to min")
print("%4s %9s %8s %8s %10s %11s %9s %6s %10s %10s %6s" % hdr)
for r in rows:
    print("%4d %9.1f %8.2f %8.2f %10.1f %11.2f %9.1f %5.0f%% %10.1f %10.2f %5.0f%%" % (
        r["concurrency"], r["sagas_per_s"], r["p50_ms"], r["p99_ms"],
        r["ceiling_sagas_per_s"], r["ceiling_p50_ms"], r["notify_sagas_per_s"],
        100 * r["ratio"], r["minimal_sagas_per_s"], r["minimal_p50_ms"],
        100 * r["ratio_to_minimal"]))
print()
print("WAL per saga during the runs (full-page images depend on when checkpoints fell):")
print("%4s %14s %10s %14s %10s %14s %10s" % ("conc", "pgsaga bytes", "FPIs",
      "ceiling bytes", "FPIs", "minimal bytes", "FPIs"))
for r in rows:
    print("%4d %14.0f %10.2f %14.0f %10.2f %14.0f %10.2f" % (
        r["concurrency"], r["wal_bytes_per_saga"], r["fpi_per_saga"],
        r["ceiling_wal_bytes_per_saga"], r["ceiling_fpi_per_saga"],
        r["minimal_wal_bytes_per_saga"], r["minimal_fpi_per_saga"]))
if "amqp_sagas_per_s" in rows[0]:
    print()
    print("over HTTP and over RabbitMQ (TRANSPORT=amqp), turns interleaved:")
    print("%4s %9s %8s %8s %9s %8s %8s %7s %12s" % ("conc", "http/s", "p50 ms", "p99 ms",
          "amqp/s", "p50 ms", "p99 ms", "amqp", "amqp WAL B"))
    for r in rows:
        print("%4d %9.1f %8.2f %8.2f %9.1f %8.2f %8.2f %6.0f%% %12.0f" % (
            r["concurrency"], r["sagas_per_s"], r["p50_ms"], r["p99_ms"],
            r["amqp_sagas_per_s"], r["amqp_p50_ms"], r["amqp_p99_ms"],
            100 * r["amqp_to_http"], r["amqp_wal_bytes_per_saga"]))
    bh = max(rows, key=lambda r: r["sagas_per_s"])
    ba = max(rows, key=lambda r: r["amqp_sagas_per_s"])
    print("best amqp throughput %.1f sagas/s (concurrency %d) = %.0f%% of the best http"
          " %.1f sagas/s (concurrency %d) (target >= 80%%)" % (
              ba["amqp_sagas_per_s"], ba["concurrency"],
              100 * ba["amqp_sagas_per_s"] / bh["sagas_per_s"], bh["sagas_per_s"],
              bh["concurrency"]))
if "amqp_cluster_sagas_per_s" in rows[0]:
    print()
    print("over one RabbitMQ node and over a 3-node cluster (quorum queues with three"
          " members), turns interleaved:")
    print("%4s %9s %8s %8s %10s %8s %8s %8s" % ("conc", "1 node/s", "p50 ms", "p99 ms",
          "cluster/s", "p50 ms", "p99 ms", "cluster"))
    for r in rows:
        print("%4d %9.1f %8.2f %8.2f %10.1f %8.2f %8.2f %7.0f%%" % (
            r["concurrency"], r["amqp_sagas_per_s"], r["amqp_p50_ms"], r["amqp_p99_ms"],
            r["amqp_cluster_sagas_per_s"], r["amqp_cluster_p50_ms"],
            r["amqp_cluster_p99_ms"], 100 * r["amqp_cluster_to_amqp"]))
    ba = max(rows, key=lambda r: r["amqp_sagas_per_s"])
    bk = max(rows, key=lambda r: r["amqp_cluster_sagas_per_s"])
    print("best cluster throughput %.1f sagas/s (concurrency %d) = %.0f%% of the best single"
          " node %.1f sagas/s (concurrency %d) (target >= 70%%); at concurrency %d the"
          " cluster does %.0f%% of the single node" % (
              bk["amqp_cluster_sagas_per_s"], bk["concurrency"],
              100 * bk["amqp_cluster_sagas_per_s"] / ba["amqp_sagas_per_s"]
              if ba["amqp_sagas_per_s"] else 0.0,
              ba["amqp_sagas_per_s"], ba["concurrency"], ba["concurrency"],
              100 * ba["amqp_cluster_to_amqp"]))
if os.path.exists(f"{out}/failover.txt"):
    trials = [line.split() for line in open(f"{out}/failover.txt") if line.strip()]
    if trials:
        print()
        print("failover of the cluster: %d trials, each a SIGKILL of the node the"
              " orchestrator was connected to, sagas posted at 20/s" % len(trials))
        for t in trials:
            led = "" if len(t) < 6 else " (leader of %s)" % (
                "no queue" if t[5] == "-" else t[5])
            print("  trial %s: node %s%s killed: the orchestrator on another node"
                  " after %.2f s, the first saga begun after the kill completed after %.2f s;"
                  " restarted, back in the cluster after %.1f s" % (
                      t[0], t[1], led, float(t[2]), float(t[3]), float(t[4])))
        for i, what in ((3, "SIGKILL to the first saga begun after it completed"),
                        (2, "SIGKILL to the orchestrator connected to another node")):
            v = sorted(float(t[i]) for t in trials)
            print("%s: median %.2f s, range %.2f-%.2f s" % (what, median(v), v[0], v[-1]))
if "tls_sagas_per_s" in rows[0]:
    print()
    print("plain and every hop on TLS (HTTPS with client certificates, PostgreSQL"
          " sslmode=verify-full), turns interleaved;")
    print("TLS handshakes per saga during the runs, service to service (client side) and"
          " accepted (server side, saga-bench's own connections included):")
    print("%4s %9s %8s %8s %9s %8s %8s %6s %9s %9s %9s %9s %9s" % (
          "conc", "plain/s", "p50 ms", "p99 ms", "tls/s", "p50 ms", "p99 ms", "tls",
          "cli full", "cli res", "srv full", "srv res", "2nd half"))
    for r in rows:
        print("%4d %9.1f %8.2f %8.2f %9.1f %8.2f %8.2f %5.0f%% %9.4f %9.4f %9.4f %9.4f %9.0f" % (
            r["concurrency"], r["sagas_per_s"], r["p50_ms"], r["p99_ms"],
            r["tls_sagas_per_s"], r["tls_p50_ms"], r["tls_p99_ms"], 100 * r["tls_to_plain"],
            r["tls_client_full_per_saga"], r["tls_client_resumed_per_saga"],
            r["tls_server_full_per_saga"], r["tls_server_resumed_per_saga"],
            r["tls_second_half_handshakes"]))
    print("(per saga over whole runs; cli: connections the services made to each other,"
          " srv: those they accepted, saga-bench's own included: one per slot and run;"
          " idle peer connections are kept 50 s, and each concurrency is warmed up first."
          " 2nd half: handshakes of both sides in the runs' second halves, a count)")
    bh = max(rows, key=lambda r: r["sagas_per_s"])
    bt = max(rows, key=lambda r: r["tls_sagas_per_s"])
    print("best tls throughput %.1f sagas/s (concurrency %d) = %.0f%% of the best plain"
          " %.1f sagas/s (concurrency %d) (target >= 85%%); at concurrency %d tls does"
          " %.0f%% of plain" % (
              bt["tls_sagas_per_s"], bt["concurrency"],
              100 * bt["tls_sagas_per_s"] / bh["sagas_per_s"], bh["sagas_per_s"],
              bh["concurrency"], bh["concurrency"], 100 * bh["tls_to_plain"]))
    t1 = [r for r in rows if r["concurrency"] == min(concs)][0]
    print("concurrency %d: tls e2e p50 %.2f ms = %.2f x plain's %.2f ms (target <= 1.3x)" % (
        t1["concurrency"], t1["tls_p50_ms"], t1["tls_p50_ms"] / t1["p50_ms"], t1["p50_ms"]))
best = max(rows, key=lambda r: r["sagas_per_s"])
print()
print("best pgsaga throughput: %.1f sagas/s at concurrency %d = %.0f%% of the ceiling there"
      " (target >= 50%%), %.0f%% of the minimal series there (target >= 60%%)" % (
          best["sagas_per_s"], best["concurrency"], 100 * best["ratio"],
          100 * best["ratio_to_minimal"]))
one = [r for r in rows if r["concurrency"] == min(concs)][0]
print("concurrency %d: e2e p50 %.2f ms = %.2f x the ceiling's per-saga p50 %.2f ms"
      " (target <= 2x)" % (one["concurrency"], one["p50_ms"],
                           one["p50_ms"] / one["ceiling_p50_ms"], one["ceiling_p50_ms"]))
print("concurrency %d: e2e p50 %.2f ms = %.2f x five minimal commits' p50 %.2f ms"
      " (target <= 1.5x)" % (one["concurrency"], one["p50_ms"],
                             one["p50_ms"] / one["minimal_p50_ms"], one["minimal_p50_ms"]))
if os.path.exists(f"{out}/wal-pgsaga.wal"):
    print()
    print("WAL of a fixed number of sagas right after a CHECKPOINT (concurrency 4,"
          " autovacuum off; pg_waldump --stats in wal-*.txt):")
    for name in ("pgsaga", "ceiling", "minimal"):
        n = int(open(f"{out}/wal-{name}.wal").read().split("\n")[1])
        rec, fpi, byt = wal(f"{out}/wal-{name}.wal")
        print("  %-8s %6d sagas: %7.1f records, %6.2f full-page images, %7.0f bytes per saga" % (
            name, n, rec / n, fpi / n, byt / n))

def wake(label, path, types):
    w = json.load(open(path))["wake_ms"]
    for t in types:
        k = w.get(t)
        if not k:
            continue
        extra = ""
        if k["claimed"]:
            extra = "; %d claimed: commit->claim %.2f, claim->handler %.2f" % (
                k["claimed"], k["commit_to_claim_p50"], k["claim_to_handler_p50"])
        print("wake-up %-10s %-24s commit->handler p50 %6.2f ms, p99 %6.2f  [n=%d%s]" % (
            label, t, k["commit_to_handler_p50"], k["commit_to_handler_p99"], k["n"], extra))
    return w["commit_from"]
print()
src = wake("in-process", f"{out}/pgsaga-c{min(concs)}.json",
           ("PayCommand", "PaymentSucceeded", "ReserveInventoryCommand", "InventoryReserved"))
wake("NOTIFY", f"{out}/notify-wake.json", ("PayCommand",))
if os.path.exists(f"{out}/tls-c{min(concs)}.json"):
    wake("tls", f"{out}/tls-c{min(concs)}.json",
         ("PayCommand", "PaymentSucceeded", "ReserveInventoryCommand", "InventoryReserved"))
if os.path.exists(f"{out}/amqp-c{min(concs)}.json"):
    wake("amqp", f"{out}/amqp-c{min(concs)}.json",
         ("PayCommand", "PaymentSucceeded", "ReserveInventoryCommand", "InventoryReserved"))
if os.path.exists(f"{out}/amqp-cluster-c{min(concs)}.json"):
    wake("amqp-3", f"{out}/amqp-cluster-c{min(concs)}.json",
         ("PayCommand", "PaymentSucceeded", "ReserveInventoryCommand", "InventoryReserved"))
print("(commit from %s; an event's handler time starts with saga_apply's read)" % src)
print()
for line in open(f"{out}/rss.txt"):
    n, kb, cpu, sagas = line.split()
    target = "" if n.endswith("-broker") else " (target <= %d)" % (
        24 if n.startswith("amqp-") else 16)
    print("%-26s peak RSS %6.1f MiB%s; CPU %6.1f s = %4.0f us per saga"
          " (%s sagas)" % (n, int(kb) / 1024, target, float(cpu),
                           1e6 * float(cpu) / max(1, int(sagas)), sagas))
