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
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from hostslib import (HOSTS, Client, begin, log, metric_sum, run, setns, wait,  # noqa: E402
                      verify_history, wait_progress)
from opslib import SERVICES, SRC, System, die  # noqa: E402

NODE = os.path.join(SRC, "scripts", "patroni-node")
MEMBERS = 3
APP_HOST = 4
PARTITION_S = float(os.environ.get("HOSTS_PARTITION_S", "45"))


class Cluster:
    """The hosts, and the Patroni members db1..db3 on hosts 1..3."""

    def __init__(self, root):
        self.root = root
        self.hosts = os.path.join(root, "hosts")
        self.dirs = [os.path.join(root, "db%d" % i) for i in range(1, MEMBERS + 1)]
        self.addrs = ["10.77.0.%d" % i for i in range(1, MEMBERS + 1)]

    def on(self, host, *args, **kw):
        return run(HOSTS, "run", self.hosts, str(host), *args, **kw)

    def up(self):
        run(HOSTS, "up", self.hosts, str(APP_HOST))
        # a SIGKILL of this test: the watchdog kills what runs on the hosts,
        # removes them and the members' data
        run(HOSTS, "watch", self.hosts, str(os.getpid()),
            "bash", "-c", "for d in \"$@\"; do %s destroy \"$d\"; done" % NODE,
            "destroy", *self.dirs)

    def start_all(self):
        """The members start together: each waits for etcd's majority."""
        errs = []

        def one(i):
            env = dict(os.environ, PATRONI_NODE_IP=self.addrs[i],
                       PATRONI_CLUSTER=" ".join(self.addrs), PATRONI_NAME="db%d" % (i + 1),
                       PGSAGA_FAST="1")
            try:
                self.on(i + 1, NODE, "start", self.dirs[i], env=env)
            except Exception as e:  # noqa: BLE001 - reported below
                errs.append(str(e))
        ts = [threading.Thread(target=one, args=(i,)) for i in range(MEMBERS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise RuntimeError("; ".join(errs))

    def index(self, name):
        return int(name[2:]) - 1

    def members(self, via=None):
        """The cluster as a member's REST API sees it (GET /cluster), as
        {name: (role, state, timeline)}: roles leader, sync_standby, replica.
        Asked of the members in turn, `via` first; {} when none answers."""
        order = [via] if via is not None else []
        order += [i for i in range(MEMBERS) if i not in order]
        for i in order:
            try:
                with urllib.request.urlopen("http://%s:8008/cluster" % self.addrs[i],
                                            timeout=5) as r:
                    rows = json.loads(r.read().decode()).get("members", [])
            except (OSError, ValueError):
                continue
            if rows:
                return {m["name"]: (m["role"], m["state"], m.get("timeline")) for m in rows}
        return {}

    def healthy(self, via=None):
        """(leader, sync standby) when the three run, one the leader and the
        other two streaming from it, one of them synchronously; else None."""
        ms = self.members(via)
        if len(ms) != MEMBERS or any(s != "running" for _, s, _ in ms.values()):
            return None
        leaders = [n for n, (r, _, _) in ms.items() if r == "leader"]
        syncs = [n for n, (r, _, _) in ms.items() if r == "sync_standby"]
        if len(leaders) != 1 or len(syncs) != 1:
            return None
        # what the members report in etcd may be older than a restart: the
        # leader's own server tells who streams from it
        r = run("psql", "-X", "-At", "-F", " ", "-d",
                "host=%s port=5432 dbname=postgres user=postgres connect_timeout=3"
                % self.addrs[self.index(leaders[0])], "-c",
                "SELECT count(*) FILTER (WHERE state = 'streaming'), count(*) FILTER"
                " (WHERE sync_state = 'sync' AND application_name = '%s')"
                " FROM pg_stat_replication" % syncs[0], check=False, timeout=20)
        if r.returncode != 0 or r.stdout.split() != [str(MEMBERS - 1), "1"]:
            return None
        return leaders[0], syncs[0]

    def leader(self, via=None):
        ms = self.members(via)
        leaders = [n for n, (r, s, _) in ms.items() if r == "leader" and s == "running"]
        return leaders[0] if len(leaders) == 1 else None

    def ctl(self, i, *args, check=False):
        return self.on(i + 1, NODE, "ctl", self.dirs[i], *args, check=check, timeout=120)

    def kill_postgres(self, i):
        self.on(i + 1, NODE, "kill", self.dirs[i], "postgres")

    def in_recovery(self, i):
        """'t' or 'f' from host i's own server, None when it does not answer
        (asked from this process, on host 4, which the partition spares)."""
        r = run("psql", "-X", "-At", "-d", "host=%s port=5432 dbname=postgres user=postgres"
                " connect_timeout=3" % self.addrs[i], "-c", "SELECT pg_is_in_recovery()",
                check=False, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None

    def url(self, role, db="pgsaga"):
        return ("host=%s port=5432,5432,5432 dbname=%s user=%s target_session_attrs=read-write"
                " connect_timeout=5" % (",".join(self.addrs), db, role))

    def down(self):
        for d in self.dirs:
            run(NODE, "destroy", d, check=False)
        run(HOSTS, "down", self.hosts, check=False)


class PatroniSystem(System):
    """opslib's System with the database of the Patroni cluster (made and
    bootstrapped by scripts/patroni-node) instead of a private one."""

    def __init__(self, cl, name, env=None):
        super().__init__(name, env=env)
        self.cl = cl
        self.db = "pgsaga"
        self.pg_port = 5432

    def url(self, role=None, db=None):
        return self.cl.url(role or "postgres", db or self.db)

    def start(self):
        os.makedirs(self.root, exist_ok=True)
        for s in SERVICES:
            self.start_service(s)
        for s in SERVICES:
            self.wait_ready(s, timeout=120)

def main():
    checks, root, home_fd = begin("patroni")
    cl = Cluster(root)
    t_start = time.monotonic()
    results = {}
    try:
        cl.up()
        # from here on this process is on host 4 (scripts/hosts run still
        # reaches every host)
        setns("/run/netns/" + run(HOSTS, "ns", cl.hosts, str(APP_HOST)).stdout.strip())
        log("hosts up; starting etcd and Patroni on hosts 1-%d" % MEMBERS)
        cl.start_all()
        pair = wait(cl.healthy, 300, 1)
        if not pair:
            print(json.dumps(cl.members()), flush=True)
            die("the Patroni cluster is not up with a synchronous standby after 300 s")
        log("cluster up after %.0f s: leader %s, synchronous standby %s"
            % (time.monotonic() - t_start, pair[0], pair[1]))
        with PatroniSystem(cl, "hosts_patroni") as sy:
            sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000000)"
                    " ON CONFLICT (item_id) DO UPDATE SET available = 1000000")
            pids = {s: p.pid for s, p in sy.procs.items()}
            client = Client(sy)
            client.start()
            try:
                run_faults(cl, sy, client, checks, results)
            finally:
                client.stop()
            log("client stopped: %d sagas answered 201, %d other answers (by status: %s)"
                % (len(client.accepted), client.errors, client.statuses))
            verify(cl, sy, client, pids, checks, results)
            print(cl.ctl(0, "history").stdout, flush=True)
    finally:
        setns("/proc/self/fd/%d" % home_fd)
        cl.down()
    log("took %.0f s" % (time.monotonic() - t_start))
    checks.done()


def failover(cl, client, checks, what, t0, old, want_new, results):
    """After a fault at t0 that takes the primary `old` away: waits for
    another leader (want_new, when known) and for orders to go through it;
    records the numbers under `what`."""
    others = [i for i in range(MEMBERS) if i != cl.index(old)]
    new = wait(lambda: (lambda n: n if n and n != old else None)(cl.leader(others[0])), 180, 0.5)
    checks.ok(new is not None, "%s: another member becomes the leader" % what)
    if want_new:
        checks.ok(new == want_new, "%s: the synchronous standby %s is promoted (the new leader: %s)"
                  % (what, want_new, new))
    checks.ok(wait_progress(client, 20, 180), "%s: orders are accepted after it" % what)
    t1 = time.monotonic()
    # the outage is the longest stretch without a 201; the 201 that ends it
    # is the first order committed on the new primary (a request begun
    # after the fault may still commit on the old one: a SIGKILLed
    # postmaster's backends finish what they are doing)
    gap, end = client.longest_gap(t0, t1)
    first = end - t0
    res = {"new_leader": new, "first_commit_s": round(first, 1), "longest_gap_s": round(gap, 1),
           "errors": client.errors_between(t0 - 1, t1)}
    results[what] = res
    log("%s: %s -> %s; first order committed on the new primary %.1f s after the %s,"
        " longest stretch without a 201 %.1f s, %d orders answered otherwise"
        % (what, old, new, first, "command" if what == "switchover" else "fault", gap,
           res["errors"]))
    return new


def wait_whole(cl, checks, what):
    """The old primary back as a standby and a synchronous standby again."""
    pair = wait(cl.healthy, 240, 1)
    checks.ok(pair is not None, "%s: the three members run again, one a synchronous standby"
              % what)
    if pair is None:
        print(json.dumps(cl.members()), flush=True)
    return pair


def run_faults(cl, sy, client, checks, results):
    checks.ok(wait_progress(client, 30, 120), "orders are accepted before any fault")

    # 1. the primary's postmaster SIGKILLed
    leader, sync = cl.healthy() or (cl.leader(), None)
    log("SIGKILL of the postmaster of %s (the primary); %s is its synchronous standby"
        % (leader, sync))
    cl.kill_postgres(cl.index(leader))
    t0 = time.monotonic()
    failover(cl, client, checks, "kill", t0, leader, sync, results)
    wait_whole(cl, checks, "kill")

    # 2. a planned switchover to the synchronous standby
    leader, sync = cl.healthy() or (cl.leader(), None)
    log("switchover from %s to %s" % (leader, sync))
    t0 = time.monotonic()
    r = cl.ctl(cl.index(sync or leader), "switchover", "--leader", leader,
               "--candidate", sync or "", "--force")
    checks.ok(r.returncode == 0, "patronictl switchover succeeds: %s%s" % (r.stdout, r.stderr))
    failover(cl, client, checks, "switchover", t0, leader, sync, results)
    wait_whole(cl, checks, "switchover")

    # 3. the primary's host cut off from the other database hosts
    leader, sync = cl.healthy() or (cl.leader(), None)
    cut = cl.index(leader)
    others = [i for i in range(MEMBERS) if i != cut]
    log("partition: %s (the primary) cut off from the other database hosts for %.0f s"
        % (leader, PARTITION_S))
    run(HOSTS, "partition", cl.hosts, str(cut + 1), *[str(i + 1) for i in others])
    t0 = time.monotonic()
    try:
        # it loses etcd's majority: Patroni demotes it (or it is stopped)
        fenced = wait(lambda: cl.in_recovery(cut) != "f", PARTITION_S, 1)
        t_fenced = time.monotonic() - t0
        checks.ok(fenced, "the cut-off primary stops taking writes within %.0f s" % PARTITION_S)
        failover(cl, client, checks, "partition", t0, leader, sync, results)
        results["partition"]["fenced_after_s"] = round(t_fenced, 1)
        log("partition: the cut-off primary took no more writes %.1f s after the cut"
            % t_fenced)
        left = PARTITION_S - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    finally:
        run(HOSTS, "heal", cl.hosts, str(cut + 1))
    log("healed")
    wait_whole(cl, checks, "partition")
    checks.ok(wait_progress(client, 20, 120), "orders are accepted after the heal")


def verify(cl, sy, client, pids, checks, results):
    n, completed = verify_history(sy, client, pids, checks)
    dups = metric_sum(sy, "saga_inbox_duplicates_total")
    log("RESULT sagas=%d completed=%d other-answers=%d inbox-duplicates-absorbed=%.0f"
        % (n, completed, client.errors, dups))
    print(json.dumps({"sagas": n, "completed": completed, "errors": client.errors,
                      "inbox_duplicates": dups, "failovers": results}), flush=True)


if __name__ == "__main__":
    main()
