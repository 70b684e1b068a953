#!/usr/bin/python3
"""/metrics of the three services under a little load.

Every scrape (before, during and after a burst of orders) must pass
`promtool check metrics` (Debian: prometheus). After the burst the counters
must have moved by what the burst did: sagas started, transitions to
Completed, orders answered 201, deliveries acknowledged per peer, the
delivery histogram; a command sent twice counts an inbox duplicate; a dead
letter shows in the outbox gauges. Every metric that docs/openapi.yaml
lists under /metrics, and every metric the alert rules in
deploy/prometheus/pgsaga-rules.yml use, must be exposed by some service: over HTTP, or
(the broker's families) by payment restarted with TRANSPORT=amqp on a
private RabbitMQ node.
"""

import os
import re
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import SRC, SERVICES, Checks, System, free_port, need_tool, request

checks = Checks("metrics")
ORDERS = 24
THREADS = 4

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset(labels.items())): value} and {name: type}."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
            continue
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if not checks.ok(m is not None, "unparsable sample line %r" % line):
            continue
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples, types


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def family_names(samples, types):
    names = set(types)
    for (n, _) in samples:
        names.add(n)
    return names


def scrape(sy, s, what):
    r = request(sy.ports[s], "GET", "/metrics")
    checks.ok(r.status == 200, "%s: GET /metrics on %s: %s" % (what, s, r.status))
    ctype = r.header("content-type") or ""
    checks.ok(ctype.startswith("text/plain"), "%s: %s Content-Type %r" % (what, s, ctype))
    p = subprocess.run(["promtool", "check", "metrics"], input=r.body, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    checks.ok(p.returncode == 0, "%s: promtool check metrics on %s: %s"
              % (what, s, p.stdout.decode("utf-8", "replace").strip()))
    return parse(r.body.decode("utf-8"))


def check_histograms(samples, types, s):
    for name, typ in types.items():
        if typ != "histogram":
            continue
        series = {}
        for (n, labels), v in samples.items():
            if n == name + "_bucket":
                rest = frozenset(kv for kv in labels if kv[0] != "le")
                le = dict(labels)["le"]
                series.setdefault(rest, []).append((float("inf") if le == "+Inf" else float(le), v))
        for rest, buckets in series.items():
            buckets.sort()
            counts = [v for _, v in buckets]
            checks.ok(counts == sorted(counts), "%s %s%s: buckets not cumulative"
                      % (s, name, dict(rest)))
            total = samples.get((name + "_count", rest))
            checks.ok(total == counts[-1], "%s %s%s: +Inf bucket %s != count %s"
                      % (s, name, dict(rest), counts[-1], total))


def documented_metrics():
    import yaml
    doc = yaml.safe_load(open(os.path.join(SRC, "docs", "openapi.yaml"), encoding="utf-8"))
    text = doc["paths"]["/metrics"]["get"]["description"]
    names = set(re.findall(r"`(saga_[a-z0-9_]+)", text))
    path = os.path.join(SRC, "deploy", "prometheus", "pgsaga-rules.yml")
    rules = set()
    for group in yaml.safe_load(open(path, encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            rules |= set(re.findall(r"\b(saga_[a-z0-9_]+)", rule["expr"]))
    return names, rules


def amqp_scrape(sy):
    """payment's /metrics under TRANSPORT=amqp, connected to a private node;
    payment is left stopped and the node destroyed."""
    node = os.path.join(sy.root, "rabbit")
    script = os.path.join(SRC, "scripts", "rabbit-node")
    r = subprocess.run(["bash", script, "start", node, str(free_port())],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not checks.ok(r.returncode == 0, "rabbit-node start: %s" % r.stderr[-500:]):
            return set(), {}
        sy.stop_service("payment")
        sy.extra_env.setdefault("payment", {}).update(TRANSPORT="amqp", AMQP_URL=r.stdout.strip())
        sy.start_service("payment")
        sy.wait_ready("payment")
        end = time.monotonic() + 30
        got = scrape(sy, "payment", "amqp")
        while value(got[0], "saga_broker_up") != 1 and time.monotonic() < end:
            time.sleep(0.3)
            got = scrape(sy, "payment", "amqp")
        checks.ok(value(got[0], "saga_broker_up") == 1, "payment over amqp: saga_broker_up 1")
        check_histograms(got[0], got[1], "payment over amqp")
        return got
    finally:
        sy.stop_service("payment")
        subprocess.run(["bash", script, "destroy", node])


def main():
    need_tool("promtool", "prometheus")
    # ADMIN_TOKEN: the admin API's metrics are exposed only while it is on
    admin = {"ADMIN_TOKEN": "metrics-admin-token-0123456789"}
    with System("metrics", env={s: admin for s in ("orchestrator", "payment", "inventory")}) as sy:
        sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000)")
        before = {s: scrape(sy, s, "idle") for s in SERVICES}

        errors = []

        def burst(t):
            for n in range(ORDERS // THREADS):
                r = sy.order("m-%d-%d" % (t, n), customer="c-%d" % t, amount=10 + n)
                if r.status != 201:
                    errors.append(r)

        threads = [threading.Thread(target=burst, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for n in range(3):  # scrapes while the burst runs
            for s in SERVICES:
                scrape(sy, s, "under load %d" % n)
            time.sleep(0.05)
        for t in threads:
            t.join()
        checks.ok(not errors, "every order accepted: %r" % errors[:3])
        checks.ok(sy.wait_terminal(30), "the sagas finished")
        # deliveries are acknowledged after the receiver's answer: give the
        # last acknowledgements a moment to be counted
        sy.wait_sql("SELECT count(*) FROM (SELECT 1 FROM orchestrator.outbox_messages "
                    "WHERE processed_at IS NULL UNION ALL SELECT 1 FROM payment.outbox_messages "
                    "WHERE processed_at IS NULL UNION ALL SELECT 1 FROM "
                    "inventory.outbox_messages WHERE processed_at IS NULL) x", "0", 10)

        # one command twice: the second is an inbox duplicate
        cmd = {"commandId": str(uuid.uuid4()), "sagaId": str(uuid.uuid4())}
        for _ in range(2):
            request(sy.ports["inventory"], "POST", "/commands/ReleaseInventoryCommand", cmd,
                    sy.internal())
        after = {s: scrape(sy, s, "after") for s in SERVICES}

        def delta(s, name, **labels):
            return value(after[s][0], name, **labels) - value(before[s][0], name, **labels)

        o = "orchestrator"
        checks.ok(delta(o, "saga_started_total") == ORDERS,
                  "saga_started_total moved by %s, want %d" % (delta(o, "saga_started_total"),
                                                                ORDERS))
        for frm, to in (("", "PendingPayment"), ("PendingPayment", "PendingInventory"),
                        ("PendingInventory", "Completed")):
            d = delta(o, "saga_transitions_total", **{"from": frm, "to": to})
            checks.ok(d == ORDERS, "saga_transitions_total{from=%r,to=%r} moved by %s, want %d"
                      % (frm, to, d, ORDERS))
        d = delta(o, "saga_http_requests_total", route="/orders", status="201")
        checks.ok(d == ORDERS, "orders answered 201: %s, want %d" % (d, ORDERS))
        for s, peer, n in ((o, "payment", ORDERS), (o, "inventory", ORDERS),
                           ("payment", "orchestrator", ORDERS),
                           ("inventory", "orchestrator", ORDERS)):
            d = delta(s, "saga_outbox_delivery_attempts_total", peer=peer, outcome="ok")
            checks.ok(d >= n, "%s: deliveries to %s acknowledged: %s, want >= %d"
                      % (s, peer, d, n))
            d = delta(s, "saga_outbox_delivery_seconds_count", peer=peer)
            checks.ok(d >= n, "%s: delivery latency observations for %s: %s" % (s, peer, d))
        for s in ("payment", "inventory"):
            d = delta(s, "saga_http_requests_total", route="/commands/{type}", status="200")
            checks.ok(d >= ORDERS, "%s: commands answered 200: %s" % (s, d))
        d = delta("inventory", "saga_inbox_duplicates_total")
        # >= : a delivery that timed out under load and came again counts too
        checks.ok(d >= 1, "inventory: saga_inbox_duplicates_total moved by %s, want >= 1" % d)
        for s in SERVICES:
            samples, types = after[s]
            check_histograms(samples, types, s)
            for g in ("saga_db_pool_in_use", "saga_db_pool_waiting"):
                checks.ok(types.get(g) == "gauge", "%s: %s is a gauge" % (s, g))
            states = [(dict(k[1]), v) for k, v in samples.items()
                      if k[0] == "saga_peer_circuit_state"]
            checks.ok(states and all(v == 0 for _, v in states),
                      "%s: every peer circuit closed: %r" % (s, states))
            for name, typ in types.items():
                checks.ok(name.startswith("saga_"), "%s: %s lacks the saga_ prefix" % (s, name))
                if typ == "counter":
                    checks.ok(name.endswith("_total"), "%s: counter %s without _total" % (s, name))

        # the outbox gauges follow a dead letter (refreshed every few seconds)
        sy.psql("INSERT INTO payment.outbox_messages (message_id, kind, destination, type, payload) "
                "SELECT id, 'event', 'orchestrator', 'PaymentSucceeded', "
                "jsonb_build_object('eventId', id, 'sagaId', gen_random_uuid()) "
                "FROM gen_random_uuid() AS id")
        sy.wait_sql("SELECT count(*) FROM payment.dead_letters", "1", 15)
        end = time.monotonic() + 15
        dead = 0.0
        while time.monotonic() < end:
            dead = value(scrape(sy, "payment", "dead letter")[0], "saga_outbox_dead")
            if dead == 1:
                break
            time.sleep(0.5)
        checks.ok(dead == 1, "payment: saga_outbox_dead shows the dead letter (%s)" % dead)
        final = {s: scrape(sy, s, "final") for s in SERVICES}
        d = value(final["payment"][0], "saga_outbox_delivery_attempts_total",
                  peer="orchestrator", outcome="dead") - value(
                      after["payment"][0], "saga_outbox_delivery_attempts_total",
                      peer="orchestrator", outcome="dead")
        checks.ok(d == 1, "payment: a delivery with outcome dead counted (%s)" % d)

        exposed = set()
        for s in SERVICES:
            exposed |= family_names(*final[s])
        over_amqp = amqp_scrape(sy)
        if over_amqp[1]:
            exposed |= family_names(*over_amqp)
        names, rules = documented_metrics()
        checks.ok(len(names) >= 8, "openapi.yaml lists the metrics under /metrics: %s"
                  % sorted(names))
        for n in sorted(names):
            checks.ok(n in exposed, "documented metric %s is not exposed by any service" % n)
        for n in sorted(rules):
            checks.ok(n in exposed, "alert rule metric %s is not exposed by any service" % n)
        issue = ["saga_transitions_total", "saga_started_total", "saga_outbox_pending",
                 "saga_outbox_dead", "saga_outbox_oldest_pending_seconds",
                 "saga_outbox_delivery_attempts_total", "saga_outbox_delivery_seconds",
                 "saga_inbox_duplicates_total", "saga_http_requests_total",
                 "saga_db_pool_in_use", "saga_db_pool_waiting", "saga_peer_circuit_state"]
        for n in issue:
            checks.ok(n in exposed, "metric %s (issue #5) is not exposed" % n)
    checks.done()


if __name__ == "__main__":
    main()
