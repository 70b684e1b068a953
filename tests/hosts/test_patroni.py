"""Suite 'hosts': the three services over PostgreSQL under Patroni, one
member on each of three hosts (scripts/hosts: network namespaces), with
failovers on purpose while orders keep coming.

Hosts 1-3 each run an etcd member and Patroni with PostgreSQL 15
(scripts/patroni-node: synchronous_mode, primary_start_timeout 0); host 4
runs the three services, whose DATABASE_URL lists the three hosts with
target_session_attrs=read-write, and this test itself (it moves into host
4's network namespace once the hosts are up).

While a client posts orders without pause and records every 201:
  1. the primary's postmaster is SIGKILLed: Patroni fails over to the
     synchronous standby (the old primary comes back as a standby);
  2. a planned switchover (patronictl switchover) to the synchronous standby;
  3. the primary's host is cut off from the other two database hosts for
     PARTITION_S (45) seconds: it loses etcd's majority and must stop taking
     writes, and the other side promotes its synchronous standby; healed,
     the old primary comes back as a standby.
Afterwards: every saga answered 201 exists and is terminal (nothing
acknowledged was lost), the audit (sql/audit.sql) is clean, no effect ran
twice, no dead letter, no service restarted. Printed for each failover:
the longest stretch without a 201, the time from the fault (or the
switchover command) to the 201 that ended it, the first order committed on
the new primary, and the orders answered otherwise meanwhile (not a
failure); then sagas and inbox duplicates absorbed. About 2.5 minutes on a
busy 2-core machine.

Root only: network namespaces. Everything made is removed at the end, and
by a watchdog (scripts/hosts watch) when this test is SIGKILLed.
"""

import json
import os
import time

from sagatest.clusters import Hosts, HostsSystem, PatroniCluster
from sagatest.hosts import (Client, begin, drive, log, metric_sum, verify_history, wait,
                            wait_progress)

MEMBERS = 3
APP_HOST = 4
PARTITION_S = float(os.environ.get("HOSTS_PARTITION_S", "45"))


def main():
    checks, root = begin("patroni")
    hs = Hosts(root, APP_HOST)
    cl = PatroniCluster(hs, range(1, MEMBERS + 1))
    t_start = time.monotonic()
    results = {}
    with hs:
        hs.enter(APP_HOST)
        log("hosts up; starting etcd and Patroni on hosts 1-%d" % MEMBERS)
        cl.start_all()
        pair = cl.wait_up()
        log("cluster up after %.0f s: leader %s, synchronous standby %s"
            % (time.monotonic() - t_start, pair[0], pair[1]))
        with HostsSystem("hosts_patroni", root, cl) as sy:
            sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000000)"
                    " ON CONFLICT (item_id) DO UPDATE SET available = 1000000")
            pids = {s: p.pid for s, p in sy.procs.items()}
            client = Client(sy)
            drive(client, lambda: run_faults(hs, cl, client, checks, results))
            verify(sy, client, pids, checks, results)
            print(cl.ctl(0, "history").stdout, flush=True)
        cl.explain(checks)
    log("took %.0f s" % (time.monotonic() - t_start))
    checks.done()


def run_faults(hs, cl, client, checks, results):
    checks.ok(wait_progress(client, 30, 120), "orders are accepted before any fault")

    # 1. the primary's postmaster SIGKILLed
    leader, sync = cl.healthy() or (cl.leader(), None)
    log("SIGKILL of the postmaster of %s (the primary); %s is its synchronous standby"
        % (leader, sync))
    cl.kill_postgres(cl.index(leader))
    t0 = time.monotonic()
    cl.failover(client, checks, "kill", t0, leader, sync, results)
    cl.wait_whole(checks, "kill")

    # 2. a planned switchover to the synchronous standby
    leader, sync = cl.healthy() or (cl.leader(), None)
    log("switchover from %s to %s" % (leader, sync))
    t0 = time.monotonic()
    r = cl.ctl(cl.index(sync or leader), "switchover", "--leader", leader,
               "--candidate", sync or "", "--force")
    checks.ok(r.returncode == 0, "patronictl switchover succeeds: %s%s" % (r.stdout, r.stderr))
    cl.failover(client, checks, "switchover", t0, leader, sync, results)
    cl.wait_whole(checks, "switchover")

    # 3. the primary's host cut off from the other database hosts
    leader, sync = cl.healthy() or (cl.leader(), None)
    cut = cl.index(leader)
    others = [i for i in range(MEMBERS) if i != cut]
    log("partition: %s (the primary) cut off from the other database hosts for %.0f s"
        % (leader, PARTITION_S))
    hs.partition(cl.on_hosts[cut], *[cl.on_hosts[i] for i in others])
    t0 = time.monotonic()
    try:
        # it loses etcd's majority: Patroni demotes it (or it is stopped)
        fenced = wait(lambda: cl.in_recovery(cut) != "f", PARTITION_S, 1)
        t_fenced = time.monotonic() - t0
        checks.ok(fenced, "the cut-off primary stops taking writes within %.0f s" % PARTITION_S)
        cl.failover(client, checks, "partition", t0, leader, sync, results)
        results["partition"]["fenced_after_s"] = round(t_fenced, 1)
        log("partition: the cut-off primary took no more writes %.1f s after the cut"
            % t_fenced)
        left = PARTITION_S - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    finally:
        hs.heal(cl.on_hosts[cut])
    log("healed")
    cl.wait_whole(checks, "partition")
    checks.ok(wait_progress(client, 20, 120), "orders are accepted after the heal")


def verify(sy, client, pids, checks, results):
    n, completed = verify_history(sy, client, pids, checks)
    dups = metric_sum(sy, "saga_inbox_duplicates_total")
    log("RESULT sagas=%d completed=%d other-answers=%d inbox-duplicates-absorbed=%.0f"
        % (n, completed, client.errors, dups))
    print(json.dumps({"sagas": n, "completed": completed, "errors": client.errors,
                      "inbox_duplicates": dups, "failovers": results}), flush=True)


if __name__ == "__main__":
    main()
