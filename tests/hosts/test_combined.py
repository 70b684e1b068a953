"""Suite 'hosts': the combined run. Patroni, a RabbitMQ cluster and two
instances of each service on two hosts at once, with a broker node killed,
a PostgreSQL failover and a partition while orders keep coming.

Hosts 1-3 each run a RabbitMQ node (scripts/rabbit-node, one cluster,
pause_minority) and an etcd member with Patroni and PostgreSQL 15
(scripts/patroni-node, synchronous_mode_strict): their ports differ, so
each pair shares a host, as a small deployment would. Hosts 4 and 5 each
run an orchestrator, a payment and an inventory service (TRANSPORT=amqp,
AMQP_URL the three nodes, DATABASE_URL the three members with
target_session_attrs=read-write, LEASE_MS=3000, the peers' URLs both
instances), host 6 this test and its client, which posts to both
orchestrators (two threads each) until the faults are over and at least
SAGAS (2,000) orders were answered 201. The cut below spares host 6, so it
reaches every service throughout.

The faults, one after the other:
  1. the RabbitMQ node orchestrator #1 is connected to is SIGKILLed; the
     services on it move to the other two nodes. Once orders go on, it is
     started again, and it rejoins the cluster while the next faults run
     (it must have rejoined by their end): a node's start and rejoin take
     30-85 s on a busy machine, and are not themselves a fault;
  2. the Patroni primary's postmaster is SIGKILLed: Patroni promotes the
     synchronous standby, and the old primary comes back as a standby.
     The cut below comes once the Patroni cluster is whole again;
  3. host 4 (#1 and its payment and inventory) is cut off from hosts 1-3,
     its database and its broker at once, for CUT_S (25) seconds: longer
     than LEASE_MS, than the pool's 10 s for a silent connection and than
     the AMQP heartbeat's two missed beats (20 s), so host 4's services
     lose both. Host 5 goes on alone (its orchestrator takes the orders,
     its payment and inventory the messages; leases held by #1 run out
     and are taken over); #1 answers 503 meanwhile. The messages host 4's
     services had taken stay with them until the broker sees them gone,
     so fewer sagas finish, and #2 takes orders only up to its admission
     limit and refuses the rest with 429. Healed, host 4's services must
     come back by themselves.
Afterwards the checks of every test of the suite: each saga answered 201
exists and is terminal, the audit is clean, no effect ran twice, no dead
letter in the outboxes nor in the broker's pgsaga.dead, no service
restarted. Printed (a RESULT line and a JSON line): sagas, completed,
other answers, inbox duplicates absorbed, and per fault the time from it
to the first saga begun after it and completed, and the longest stretch
without a 201 from the fault until orders went on after it.

The faults themselves do not overlap, so each one's numbers are its own;
only the node's restart runs beside the others, and the second and third
RabbitMQ nodes start together once the first is up (both join it), which
keeps the test within its budget: about 4 minutes on a busy 2-core
machine, half of it starting the two clusters.

Root only: network namespaces. Everything made is removed at the end, and
by a watchdog (scripts/hosts watch) when this test is SIGKILLed.
"""

import json
import os
import threading
import time

from sagatest.clusters import Hosts, HostsSystem, PatroniCluster, RabbitCluster, diagnose
from sagatest.hosts import (Client, amqp_log, begin, drive, first_completion_after, log,
                            log_event, metric_sum, readyz, together, verify_history, wait,
                            wait_progress)
from sagatest.core import die

CLUSTER_HOSTS = (1, 2, 3)
A, B, CLIENT_HOST = 4, 5, 6
SAGAS = int(os.environ.get("HOSTS_SAGAS", "2000"))
CUT_S = float(os.environ.get("HOSTS_CUT_S", "25"))
LEASE_MS = 3000
CLIENT_TIMEOUT_S = 30

# instance -> (service, host, port)
INSTANCES = {
    "orchestrator": ("orchestrator", A, 8080),
    "payment": ("payment", A, 8081),
    "inventory": ("inventory", A, 8082),
    "orchestrator2": ("orchestrator", B, 8080),
    "payment2": ("payment", B, 8081),
    "inventory2": ("inventory", B, 8082),
}


def main():
    checks, root = begin("combined")
    hs = Hosts(root, CLIENT_HOST)
    mq = RabbitCluster(hs, CLUSTER_HOSTS)
    db = PatroniCluster(hs, CLUSTER_HOSTS)
    t_start = time.monotonic()
    results = {}
    with hs:
        hs.enter(CLIENT_HOST)
        start_clusters(mq, db, checks, t_start)
        env = {"TRANSPORT": "amqp", "AMQP_URL": mq.urls(), "LEASE_MS": str(LEASE_MS)}
        with HostsSystem("hosts_combined", root, db, hs, INSTANCES, env) as sy:
            sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000000)"
                    " ON CONFLICT (item_id) DO UPDATE SET available = 1000000")
            pids = {s: p.pid for s, p in sy.procs.items()}
            ok = wait(lambda: all(readyz(sy, s).get("broker") == "up" for s in INSTANCES), 60)
            checks.ok(ok, "the six services connect to the broker")
            mq.queues_everywhere(checks)
            log("services up after %.0f s" % (time.monotonic() - t_start))
            # #1's answer to an order it holds when the cut begins comes once
            # its pool has given its connections up (12-13 s under load): the
            # client waits 30 s, so that a slow answer is not taken for none
            client = Client(sy, threads=2, targets=["orchestrator", "orchestrator2"],
                            timeout=CLIENT_TIMEOUT_S)
            drive(client, lambda: run_faults(hs, mq, db, sy, client, checks, results))
            verify(mq, sy, client, pids, checks, results)
            amqp_log(sy, 6)
            print(db.ctl(0, "history").stdout, flush=True)
        db.explain(checks)
    log("took %.0f s" % (time.monotonic() - t_start))
    checks.done()


def start_clusters(mq, db, checks, t_start):
    """The Patroni members start together (each waits for etcd's majority)
    while the RabbitMQ nodes start: the first, then the other two together
    (both join the first)."""
    log("hosts up; starting RabbitMQ, etcd and Patroni on hosts %s" % (CLUSTER_HOSTS,))

    def started(start, what):
        start()
        log("%s started after %.0f s" % (what, time.monotonic() - t_start))
    try:
        together(lambda: started(db.start_all, "Patroni members"),
                 lambda: started(lambda: mq.start_all(at_once=True), "RabbitMQ nodes"))
    except RuntimeError as e:
        die(str(e))
    pair = db.wait_up()
    # queues declared before every node has joined get fewer members, and
    # one node's loss then stops them: the test would measure that. The
    # nodes joined the first one as they started; it sees them all.
    formed = wait(lambda: mq.whole(0), 120, 2)
    checks.ok(formed, "the RabbitMQ nodes form one cluster: %r" % mq.running_nodes(0))
    log("clusters up after %.0f s: leader %s, synchronous standby %s"
        % (time.monotonic() - t_start, pair[0], pair[1]))


def mono(wall):
    """The monotonic time of wall (epoch), a moment just past."""
    return time.monotonic() - (time.time() - wall)


def record(sy, client, res, t0, wall0, t1):
    """Adds to res the numbers of a fault at t0 (monotonic; wall0 the same
    moment, epoch) after which orders went on again at t1: the time to the
    first saga begun after the fault and completed, the longest stretch of
    [t0, t1] without a 201 (and the time from t0 to the 201 that ended it),
    and the orders answered otherwise meanwhile."""
    first = wait(lambda: first_completion_after(sy, wall0), 120, 0.5)
    res["first_completed_s"] = round(first, 1) if first is not None else None
    gap, end = client.longest_gap(t0, t1)
    res["longest_gap_s"] = round(gap, 1)
    res["gap_ended_s"] = round(end - t0, 1)
    res["other_answers"] = client.errors_between(t0, t1)
    return first


def broker_kill(mq, sy, client, checks, results):
    """Fault 1: SIGKILL of the RabbitMQ node orchestrator #1 is connected
    to. Returns the thread that starts it again and waits for it to rejoin
    (its time is recorded as rejoined_after_s)."""
    k = mq.kill_node_of(sy, "orchestrator", checks)
    victim, lost, moved = k["victim"], k["lost"], k["moved"]
    res = results["broker_kill"] = {"node": mq.addrs[victim], "moved_after_s": k["moved_after_s"]}
    checks.ok(wait_progress(client, 20, 120), "orders are accepted after the SIGKILL")
    first = record(sy, client, res, mono(lost), lost, time.monotonic())
    checks.ok(first is not None, "a saga begun after the SIGKILL completes")
    if first is None:
        diagnose(sy, mq)
    log("broker kill: #1's connection broke, it was connected to %s %s s later; the first saga"
        " begun after the break completed %s s after it; longest stretch without a 201 %.1f s"
        % (moved, res["moved_after_s"], res["first_completed_s"], res["longest_gap_s"]))

    def restart():
        t0 = time.monotonic()
        try:
            mq.start(victim)
            back = wait(lambda: mq.whole(victim), 180, 2)
        except RuntimeError as e:
            res["restart_error"] = str(e)
            return
        res["rejoined_after_s"] = round(time.monotonic() - t0, 1) if back else None
    log("starting the killed node again, meanwhile the next fault")
    t = threading.Thread(target=restart)
    t.start()
    return t


def pg_failover(db, sy, client, checks, results):
    """Fault 2: SIGKILL of the Patroni primary's postmaster."""
    leader, sync = db.healthy() or (db.leader(), None)
    log("SIGKILL of the postmaster of %s (the primary); %s is its synchronous standby"
        % (leader, sync))
    db.kill_postgres(db.index(leader))
    # from when the kill returned: the postmaster is gone by then (its
    # backends may still finish what they were doing)
    t0, wall0 = time.monotonic(), time.time()
    db.failover(client, checks, "pg_failover", t0, leader, sync, results)
    res = results["pg_failover"]
    first = record(sy, client, res, t0, wall0, time.monotonic())
    checks.ok(first is not None, "a saga begun after the failover's SIGKILL completes")
    db.wait_whole(checks, "pg_failover")
    res["whole_after_s"] = round(time.monotonic() - t0, 1)
    log("pg failover: the first saga begun after the SIGKILL completed %s s after it; the"
        " cluster was whole again %.1f s after it" % (res["first_completed_s"],
                                                      res["whole_after_s"]))


def cut(hs, mq, sy, client, checks, results):
    """Fault 3: host 4 cut off from hosts 1-3 (its database and broker)."""
    log("partition: host %d (orchestrator #1, payment, inventory) cut off from hosts %s for"
        " %.0f s" % (A, CLUSTER_HOSTS, CUT_S))
    hs.partition(A, *CLUSTER_HOSTS)
    t0, wall0 = time.monotonic(), time.time()
    res = results["cut"] = {}
    try:
        down = wait(lambda: not readyz(sy, "orchestrator"), CUT_S, 0.25)
        res["not_ready_after_s"] = round(time.monotonic() - t0, 1) if down else None
        during = wait_progress(client, 20, max(1.0, CUT_S - (time.monotonic() - t0)))
        left = CUT_S - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    finally:
        hs.heal(A)
    t_heal = time.monotonic()
    log("healed")
    checks.ok(down, "orchestrator #1 reports it lost its database within the cut")
    # #2 takes orders during the cut up to its admission limit; what is
    # beyond it gets a 429 (see the docstring)
    by2 = client.answered("orchestrator2", t0, t_heal)
    through2 = [a for b, a, st in by2 if st == 201]
    checks.ok(through2, "orders are accepted through #2 during the cut: %d (%s)"
              % (len(through2), "20 more in all" if during else "fewer than 20 more in all"))
    res["accepted_by_2_during"] = len(through2)
    res["answers_of_2_during"] = {st: sum(1 for _, _, s in by2 if s == st)
                                  for st in sorted({s for _, _, s in by2})}
    checks.ok(all(st in (201, 429) for _, _, st in by2),
              "#2 answers every order during the cut with 201 or 429: %s"
              % res["answers_of_2_during"])
    by1 = client.answered("orchestrator", t0, t_heal)
    res["answers_of_1_during"] = {st: sum(1 for _, _, s in by1 if s == st)
                                  for st in sorted({s for _, _, s in by1})}
    back = wait(lambda: client.first_201("orchestrator", t_heal), 120, 0.25)
    checks.ok(back is not None, "orchestrator #1 takes orders again after the heal")
    res["back_after_heal_s"] = round(back - t_heal, 1) if back else None
    up = wait(lambda: all(readyz(sy, s).get("broker") == "up"
                          for s in INSTANCES if INSTANCES[s][1] == A), 120, 0.25)
    checks.ok(up, "host %d's services are connected to the broker again after the heal" % A)
    checks.ok(wait_progress(client, 20, 120), "orders are accepted after the heal")
    # when host 4's services said they lost each (logged, not asserted: the
    # broker's side may close first, and a cut shorter than two heartbeats
    # may leave an AMQP connection whole)
    for key, s, what in (("db_lost_by_1_after_s", "orchestrator", "database connection lost"),
                         ("amqp_lost_by_payment_after_s", "payment", "amqp: connection lost")):
        lost = log_event(sy, s, what, wall0)
        res[key] = round(lost - wall0, 1) if lost else None
    first = record(sy, client, res, t0, wall0, time.monotonic())
    checks.ok(first is not None, "a saga begun after the cut completes")
    log("cut: #1 not ready %s s after it; #2 accepted %d orders during it; #1 answered %s"
        " meanwhile and took orders again %s s after the heal; the first saga begun after"
        " the cut completed %s s after it; longest stretch without a 201 %.1f s"
        % (res["not_ready_after_s"], len(through2), res["answers_of_1_during"],
           res["back_after_heal_s"], res["first_completed_s"], res["longest_gap_s"]))


def run_faults(hs, mq, db, sy, client, checks, results):
    checks.ok(wait_progress(client, 30, 120), "orders are accepted before any fault")
    t = time.monotonic()
    checks.ok(wait(lambda: client.first_201("orchestrator", t)
                   and client.first_201("orchestrator2", t), 60),
              "both orchestrators take orders")
    restart = broker_kill(mq, sy, client, checks, results)
    try:
        pg_failover(db, sy, client, checks, results)
        cut(hs, mq, sy, client, checks, results)
    finally:
        restart.join()
    res = results["broker_kill"]
    checks.ok(res.get("rejoined_after_s") is not None,
              "the killed RabbitMQ node is back in the cluster: %s"
              % res.get("restart_error", "%s s after its start" % res.get("rejoined_after_s")))
    log("faults done: %d sagas answered 201; posting until %d" % (client.count(), SAGAS))
    checks.ok(wait(lambda: client.count() >= SAGAS, 300, 0.5),
              "%d orders are answered 201: %d" % (SAGAS, client.count()))


def verify(mq, sy, client, pids, checks, results):
    n, completed = verify_history(sy, client, pids, checks)
    mq.dead_letters_checked(checks)
    dups = metric_sum(sy, "saga_inbox_duplicates_total")
    per = " ".join("%s:first-completed=%ss,longest-gap=%ss" % (
        f, results[f].get("first_completed_s"), results[f].get("longest_gap_s"))
        for f in ("broker_kill", "pg_failover", "cut") if f in results)
    log("RESULT sagas=%d completed=%d other-answers=%d inbox-duplicates-absorbed=%.0f %s"
        % (n, completed, client.errors, dups, per))
    print(json.dumps({"sagas": n, "completed": completed, "errors": client.errors,
                      "statuses": client.statuses, "inbox_duplicates": dups,
                      "faults": results}), flush=True)


if __name__ == "__main__":
    main()
