"""Suite 'hosts': the three services over a 3-node RabbitMQ cluster, each
node on a host of its own (scripts/hosts: network namespaces), with faults
on purpose while orders keep coming.

Hosts 1-3 run the RabbitMQ nodes (scripts/rabbit-node, a cluster with
pause_minority); host 4 runs PostgreSQL and the three services, whose
AMQP_URL lists the three nodes, and this test itself (it moves into host
4's network namespace once the hosts are up, so its client, psql and the
services meet on host 4's loopback).

While a client posts orders without pause and records every 201:
  1. the node the orchestrator is connected to is SIGKILLed, then started
     again;
  2. the node that leads the queue pgsaga.inventory is SIGKILLed, then
     started again;
  3. the node the orchestrator is connected to then is cut off from the
     other two nodes for PARTITION_S (30) seconds, or longer (at most 60 s
     more) until orders have gone on through the other two, then healed;
  4. a rolling restart: each node in turn stopped (gracefully) and started
     again, the next one only when it is back in the cluster.
Afterwards: every saga answered 201 is terminal, the audit (sql/audit.sql)
is clean, no effect ran twice (the audit's checks 4a-4b), no dead letter
(in the outboxes or in the broker's pgsaga.dead), no service restarted.
Printed: sagas, the time from the SIGKILL to the orchestrator connected to
another node and to the first saga completed through the others, inbox
duplicates absorbed, connections replaced because one destination's
publishes kept being nacked (mq_link.c, NACKS_MAX).

Root only: network namespaces. Everything made is removed at the end, and
by a watchdog (scripts/hosts watch) when this test is SIGKILLed. Takes
about 6 minutes on a quiet 2-core machine, 10 on a busy one, most of it
starting RabbitMQ nodes.
"""

import json
import os
import time

from sagatest.clusters import Hosts, RabbitCluster, diagnose
from sagatest.hosts import (PSQL_TIMEOUT_S, Client, amqp_log, begin, drive,
                            first_completion_after, link_events, log, metric_sum, readyz,
                            verify_history, wait, wait_progress)
from sagatest.core import System

NODES = 3
APP_HOST = 4
PARTITION_S = float(os.environ.get("HOSTS_PARTITION_S", "30"))
CUT_MORE_S = 60


def main():
    checks, root = begin("rabbit-cluster")
    hs = Hosts(root, APP_HOST)
    cl = RabbitCluster(hs, range(1, NODES + 1))
    t_start = time.monotonic()
    with hs:
        log("hosts up; starting a %d-node RabbitMQ cluster" % NODES)
        cl.start_all()
        log("cluster up after %.0f s" % (time.monotonic() - t_start))
        # queues declared before every node has joined get fewer members,
        # and one node's loss then stops them: the test would measure that
        formed = wait(lambda: all(cl.whole(i) for i in range(NODES)), 120, 2)
        checks.ok(formed, "the %d nodes form one cluster: %r"
                  % (NODES, [cl.running_nodes(i) for i in range(NODES)]))
        hs.enter(APP_HOST)
        env = {s: {"TRANSPORT": "amqp", "AMQP_URL": cl.urls()}
               for s in ("orchestrator", "payment", "inventory")}
        with System("hosts_rabbit", env=env, psql_timeout=PSQL_TIMEOUT_S) as sy:
            sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000000)"
                    " ON CONFLICT (item_id) DO UPDATE SET available = 1000000")
            pids = {s: p.pid for s, p in sy.procs.items()}
            ok = wait(lambda: readyz(sy).get("broker") == "up", 60)
            checks.ok(ok, "the orchestrator connects to the cluster")
            cl.queues_everywhere(checks)
            client = Client(sy)
            rejoined = drive(client, lambda: run_faults(hs, cl, sy, client, checks))
            verify(cl, sy, client, pids, checks, rejoined)
            amqp_log(sy)
    log("took %.0f s" % (time.monotonic() - t_start))
    checks.done()


def run_faults(hs, cl, sy, client, checks):
    checks.ok(wait_progress(client, 30, 120), "orders are accepted before any fault")
    # 1. SIGKILL the node the orchestrator uses
    k = cl.kill_node_of(sy, "orchestrator", checks)
    victim, lost, moved = k["victim"], k["lost"], k["moved"]
    checks.ok(wait_progress(client, 30, 120), "orders are accepted after the SIGKILL")
    first = wait(lambda: first_completion_after(sy, lost), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the SIGKILL completes")
    if first is None:
        diagnose(sy, cl)
    log("SIGKILL: the orchestrator's connection broke, it was connected to %s %.1f s later"
        " (%.1f s after the kill command returned); the first saga begun after the break"
        " completed %.1f s after it" % (moved, k["moved_after_s"] or 0.0, k["after_kill_s"],
                                         first or -1))
    log("starting the killed node again")
    cl.start(victim)
    checks.ok(wait(lambda: cl.whole(victim), 180, 2),
              "the restarted node is back in the cluster")
    checks.ok(wait_progress(client, 30, 120), "orders are accepted with the node back")

    # 2. SIGKILL the node that leads pgsaga.inventory's Raft group
    leader = cl.queue_leader("pgsaga.inventory")
    victim = cl.index(leader.split("@", 1)[-1] + ":5672") if leader else None
    checks.ok(victim is not None, "the leader of pgsaga.inventory is known: %r" % leader)
    if victim is not None:
        log("SIGKILL of %s, the leader of pgsaga.inventory" % cl.addrs[victim])
        wall = time.time()
        cl.kill(victim)
        first = wait(lambda: first_completion_after(sy, wall), 120, 0.5)
        checks.ok(first is not None, "a saga begun after the leader's SIGKILL completes")
        if first is None:
            diagnose(sy, cl)
        log("leader SIGKILL: the first saga begun after it completed %.1f s after it"
            % (first or -1))
        cl.start(victim)
        checks.ok(wait(lambda: cl.whole(victim), 180, 2),
                  "the restarted leader is back in the cluster")
        checks.ok(wait_progress(client, 30, 120), "orders are accepted with the leader back")

    # 3. cut the orchestrator's node off from the other two
    node = readyz(sy).get("brokerNode")
    cut = cl.index(node)
    cut = cut if cut is not None else 0
    others = [cl.on_hosts[i] for i in range(NODES) if i != cut]
    log("partition: %s cut off from the other nodes for %.0f s" % (cl.addrs[cut], PARTITION_S))
    hs.partition(cl.on_hosts[cut], *others)
    t1, wall1 = time.monotonic(), time.time()
    try:
        # the cut node pauses once it notices the cut (net_ticktime 20 s:
        # 15-25 s), and only then closes the orchestrator's connection; the
        # cut lasts PARTITION_S, and longer (up to CUT_MORE_S) until orders
        # have gone on through the other two: a move at 28 s of 30 left no
        # time to see them (CI, 2026-12-03)
        bound = PARTITION_S + CUT_MORE_S
        moved = wait(lambda: (lambda r: r.get("broker") == "up" and r.get("brokerNode") != node
                              and r.get("brokerNode"))(readyz(sy)), bound, 0.2)
        t_move = time.monotonic() - t1
        progressed = wait_progress(client, 10, max(1.0, bound - (time.monotonic() - t1)))
        left = PARTITION_S - (time.monotonic() - t1)
        if left > 0:
            time.sleep(left)
    finally:
        hs.heal(cl.on_hosts[cut])
    log("healed; during the partition the orchestrator %s, orders %s"
        % ("moved to %s after %.1f s" % (moved, t_move) if moved else "stayed",
           "went on" if progressed else "stalled"))
    checks.ok(progressed, "orders are accepted during the partition")
    first = wait(lambda: first_completion_after(sy, wall1), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the partition started completes")
    if first is None:
        diagnose(sy, cl)
    log("partition: first saga begun after the cut completed %.1f s after it" % (first or -1))
    # pause_minority: the paused node sees the majority again and restarts
    # its own application. Once in a CI run under heavy load it had not
    # within 180 s: that is RabbitMQ's recovery, not what this test proves,
    # so the node is then restarted as an operator would (docs/operations.md)
    # and the run says so; rejoining after that restart is asserted.
    rejoined = wait(lambda: cl.whole(cut), 180, 2) is not None
    if not rejoined:
        log("the cut-off node is not back by itself 180 s after the heal; cluster_status: %r;"
            " the end of its log:\n%s" % (cl.ctl(cut, "cluster_status").stdout[-1500:],
                                          cl.log_tail(cut)))
        cl.stop(cut)
        cl.start(cut)
        checks.ok(wait(lambda: cl.whole(cut), 180, 2),
                  "the cut-off node is back in the cluster after a restart")
    checks.ok(wait_progress(client, 30, 120), "orders are accepted after the heal")

    # 4. a rolling restart
    t3 = time.monotonic()
    for i in range(NODES):
        log("rolling restart: stopping %s" % cl.addrs[i])
        cl.stop(i)
        checks.ok(wait_progress(client, 10, 120), "orders are accepted with %s stopped"
                  % cl.addrs[i])
        cl.start(i)
        checks.ok(wait(lambda: cl.whole(i), 180, 2),
                  "%s is back in the cluster" % cl.addrs[i])
    wall = time.time()
    first = wait(lambda: first_completion_after(sy, wall), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the rolling restart completes")
    if first is None:
        diagnose(sy, cl)
    log("rolling restart done in %.0f s" % (time.monotonic() - t3))
    return rejoined


def verify(cl, sy, client, pids, checks, rejoined):
    n, completed = verify_history(sy, client, pids, checks)
    ok, rows, text = cl.dead_letters_checked(checks)
    checks.ok(ok and all(len(r) > 2 and r[2] == "quorum" for r in rows),
              "every queue is a quorum queue: %r" % text)
    dups = metric_sum(sy, "saga_inbox_duplicates_total")
    replaced = sum(link_events(sy, s, "in a row nacked") for s in sy.ports)
    log("RESULT sagas=%d completed=%d other-answers=%d inbox-duplicates-absorbed=%.0f"
        " connections-replaced-for-nacks=%d cut-off-node-rejoined-by-itself=%s"
        % (n, completed, client.errors, dups, replaced, rejoined))
    print(json.dumps({"sagas": n, "completed": completed, "errors": client.errors,
                      "inbox_duplicates": dups, "replaced_for_nacks": replaced,
                      "rejoined_by_itself": rejoined}), flush=True)


if __name__ == "__main__":
    main()
