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
     other two nodes for PARTITION_S (30) seconds, then healed;
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

import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from hostslib import (HOSTS, Client, begin, first_completion_after, log,  # noqa: E402
                      log_event, metric_sum, readyz, run, setns, verify_history, wait,
                      wait_progress)
from opslib import SRC, System, request  # noqa: E402

NODE = os.path.join(SRC, "scripts", "rabbit-node")
NODES = 3
APP_HOST = 4
PARTITION_S = float(os.environ.get("HOSTS_PARTITION_S", "30"))
COOKIE = "PGSAGAHOSTSTEST"


class Cluster:
    """The hosts and the RabbitMQ nodes on hosts 1..NODES."""

    def __init__(self, root):
        self.root = root
        self.hosts = os.path.join(root, "hosts")
        self.dirs = [os.path.join(root, "rabbit%d" % i) for i in range(1, NODES + 1)]
        self.addrs = ["10.77.0.%d" % i for i in range(1, NODES + 1)]

    def on(self, host, *args, **kw):
        return run(HOSTS, "run", self.hosts, str(host), *args, **kw)

    def up(self):
        run(HOSTS, "up", self.hosts, str(APP_HOST))
        # a SIGKILL of this test: the watchdog kills what runs on the hosts,
        # removes them and the nodes' data
        run(HOSTS, "watch", self.hosts, str(os.getpid()),
                 "bash", "-c", "for d in \"$@\"; do %s destroy \"$d\"; done" % NODE,
                 "destroy", *self.dirs)

    def node_env(self, i):
        return dict(os.environ, RABBIT_NODE_IP=self.addrs[i], RABBIT_CLUSTER=" ".join(self.addrs),
                    RABBIT_COOKIE=COOKIE)

    def start(self, i):
        self.on(i + 1, NODE, "start", self.dirs[i], "5672", env=self.node_env(i))

    def start_all(self):
        # the first forms the cluster, the others join it (classic discovery)
        # one after the other: two nodes booting at once may each pick the
        # other, half-started, to join
        for i in range(NODES):
            self.start(i)

    def kill(self, i):
        self.on(i + 1, NODE, "kill", self.dirs[i])

    def stop(self, i):
        self.on(i + 1, NODE, "stop", self.dirs[i])

    def ctl(self, i, *args):
        return self.on(i + 1, NODE, "ctl", self.dirs[i], *args, check=False)

    def urls(self):
        return ",".join("amqp://guest:guest@%s:5672/%%2f" % a for a in self.addrs)

    def down(self):
        for d in self.dirs:
            run(NODE, "destroy", d, check=False)
        run(HOSTS, "down", self.hosts, check=False)


def node_index(cl, node):
    for i, a in enumerate(cl.addrs):
        if node == a + ":5672":
            return i
    return None


def main():
    checks, root, home_fd = begin("rabbit-cluster")
    cl = Cluster(root)
    t_start = time.monotonic()
    try:
        cl.up()
        log("hosts up; starting a %d-node RabbitMQ cluster" % NODES)
        cl.start_all()
        log("cluster up after %.0f s" % (time.monotonic() - t_start))
        # queues declared before every node has joined get fewer members,
        # and one node's loss then stops them: the test would measure that
        formed = wait(lambda: all(len(running_nodes(cl, i)) == NODES for i in range(NODES)),
                      120, 2)
        checks.ok(formed, "the %d nodes form one cluster: %r"
                  % (NODES, [running_nodes(cl, i) for i in range(NODES)]))
        setns("/run/netns/" + run(HOSTS, "ns", cl.hosts, str(APP_HOST)).stdout.strip())
        env = {s: {"TRANSPORT": "amqp", "AMQP_URL": cl.urls()}
               for s in ("orchestrator", "payment", "inventory")}
        with System("hosts_rabbit", env=env) as sy:
            sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000000)"
                    " ON CONFLICT (item_id) DO UPDATE SET available = 1000000")
            pids = {s: p.pid for s, p in sy.procs.items()}
            ok = wait(lambda: readyz(sy).get("broker") == "up", 60)
            checks.ok(ok, "the orchestrator connects to the cluster")
            members = wait(lambda: (lambda m: m if m and all(n == NODES for n in m.values())
                                    else None)(queue_members(cl)), 60, 1)
            checks.ok(members, "every queue has a member on each node: %r" % queue_members(cl))
            client = Client(sy)
            client.start()
            rejoined = None
            try:
                rejoined = run_faults(cl, sy, client, checks)
            finally:
                client.stop()
            log("client stopped: %d sagas answered 201, %d other answers"
                % (len(client.accepted), client.errors))
            verify(cl, sy, client, pids, checks, rejoined)
            amqp_log(sy)
    finally:
        setns("/proc/self/fd/%d" % home_fd)
        cl.down()
    log("took %.0f s" % (time.monotonic() - t_start))
    checks.done()


def run_faults(cl, sy, client, checks):
    checks.ok(wait_progress(client, 30, 120), "orders are accepted before any fault")
    # 1. SIGKILL the node the orchestrator uses
    node = readyz(sy).get("brokerNode")
    victim = node_index(cl, node)
    checks.ok(victim is not None, "/readyz names a node of the cluster: %r" % node)
    victim = victim or 0
    log("SIGKILL of the RabbitMQ node on %s (the orchestrator's)" % cl.addrs[victim])
    before = time.time()
    cl.kill(victim)
    # from when the kill returned: the node's processes are all gone by then
    t0 = time.monotonic()
    moved = wait(lambda: (lambda r: r.get("broker") == "up" and r.get("brokerNode") != node
                          and r.get("brokerNode"))(readyz(sy)), 120)
    t_move = time.monotonic() - t0
    checks.ok(moved, "the orchestrator moves to another node after the SIGKILL")
    checks.ok(wait_progress(client, 30, 120), "orders are accepted after the SIGKILL")
    # the node died when the orchestrator's connection broke (a socket error,
    # not a close): the kill script itself may take seconds on a busy machine
    lost = wait(lambda: log_event(sy, "orchestrator", "amqp: connection lost", before), 30, 0.5)
    checks.ok(lost is not None, "the orchestrator's log tells when its connection broke")
    lost = lost or before
    back = log_event(sy, "orchestrator", "amqp: connected to", lost)
    first = wait(lambda: first_completion_after(sy, lost), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the SIGKILL completes")
    if first is None:
        diagnose(cl, sy)
    log("SIGKILL: the orchestrator's connection broke, it was connected to %s %.1f s later"
        " (%.1f s after the kill command returned); the first saga begun after the break"
        " completed %.1f s after it" % (moved, (back or lost) - lost, t_move, first or -1))
    log("starting the killed node again")
    cl.start(victim)
    checks.ok(wait(lambda: len(running_nodes(cl, victim)) == NODES, 180, 2),
              "the restarted node is back in the cluster")
    checks.ok(wait_progress(client, 30, 120), "orders are accepted with the node back")

    # 2. SIGKILL the node that leads pgsaga.inventory's Raft group
    leader = queue_leader(cl, "pgsaga.inventory")
    victim = node_index(cl, leader.split("@", 1)[-1] + ":5672") if leader else None
    checks.ok(victim is not None, "the leader of pgsaga.inventory is known: %r" % leader)
    if victim is not None:
        log("SIGKILL of %s, the leader of pgsaga.inventory" % cl.addrs[victim])
        wall = time.time()
        cl.kill(victim)
        first = wait(lambda: first_completion_after(sy, wall), 120, 0.5)
        checks.ok(first is not None, "a saga begun after the leader's SIGKILL completes")
        if first is None:
            diagnose(cl, sy)
        log("leader SIGKILL: the first saga begun after it completed %.1f s after it"
            % (first or -1))
        cl.start(victim)
        checks.ok(wait(lambda: len(running_nodes(cl, victim)) == NODES, 180, 2),
                  "the restarted leader is back in the cluster")
        checks.ok(wait_progress(client, 30, 120), "orders are accepted with the leader back")

    # 3. cut the orchestrator's node off from the other two
    node = readyz(sy).get("brokerNode")
    cut = node_index(cl, node)
    cut = cut if cut is not None else 0
    others = [str(i + 1) for i in range(NODES) if i != cut]
    log("partition: %s cut off from the other nodes for %.0f s" % (cl.addrs[cut], PARTITION_S))
    run(HOSTS, "partition", cl.hosts, str(cut + 1), *others)
    t1, wall1 = time.monotonic(), time.time()
    try:
        moved = wait(lambda: (lambda r: r.get("broker") == "up" and r.get("brokerNode") != node
                              and r.get("brokerNode"))(readyz(sy)), PARTITION_S, 0.2)
        t_move = time.monotonic() - t1
        progressed = wait_progress(client, 10, max(1.0, PARTITION_S - (time.monotonic() - t1)))
        left = PARTITION_S - (time.monotonic() - t1)
        if left > 0:
            time.sleep(left)
    finally:
        run(HOSTS, "heal", cl.hosts, str(cut + 1))
    log("healed; during the partition the orchestrator %s, orders %s"
        % ("moved to %s after %.1f s" % (moved, t_move) if moved else "stayed",
           "went on" if progressed else "stalled"))
    checks.ok(progressed, "orders are accepted during the partition")
    first = wait(lambda: first_completion_after(sy, wall1), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the partition started completes")
    if first is None:
        diagnose(cl, sy)
    log("partition: first saga begun after the cut completed %.1f s after it" % (first or -1))
    # pause_minority: the paused node sees the majority again and restarts
    # its own application. Once in a CI run under heavy load it had not
    # within 180 s: that is RabbitMQ's recovery, not what this test proves,
    # so the node is then restarted as an operator would (docs/operations.md)
    # and the run says so; rejoining after that restart is asserted.
    rejoined = wait(lambda: len(running_nodes(cl, cut)) == NODES, 180, 2)
    if not rejoined:
        log("the cut-off node is not back by itself 180 s after the heal; cluster_status: %r;"
            " the end of its log:\n%s" % (cl.ctl(cut, "cluster_status").stdout[-1500:],
                                          node_log_tail(cl, cut)))
        cl.stop(cut)
        cl.start(cut)
        checks.ok(wait(lambda: len(running_nodes(cl, cut)) == NODES, 180, 2),
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
        checks.ok(wait(lambda: len(running_nodes(cl, i)) == NODES, 180, 2),
                  "%s is back in the cluster" % cl.addrs[i])
    wall = time.time()
    first = wait(lambda: first_completion_after(sy, wall), 120, 0.5)
    checks.ok(first is not None, "a saga begun after the rolling restart completes")
    if first is None:
        diagnose(cl, sy)
    log("rolling restart done in %.0f s" % (time.monotonic() - t3))
    return rejoined


def queue_leader(cl, name):
    """The node (rabbit@address) leading queue name, or None."""
    for i in range(NODES):
        q = cl.ctl(i, "list_queues", "-q", "--no-table-headers", "name", "leader")
        for line in q.stdout.splitlines() if q.returncode == 0 else []:
            f = line.split()
            if len(f) == 2 and f[0] == name:
                return f[1]
    return None


def diagnose(cl, sy):
    """What a stall looks like: where the sagas wait, what the outboxes
    hold, what the links say and what each node's queues hold."""
    print(sy.psql("SELECT state, count(*), min(created_at), max(updated_at) FROM orchestrator.saga_instances"
                  " GROUP BY 1 ORDER BY 2 DESC"), flush=True)
    for s in ("orchestrator", "payment", "inventory"):
        print(s, "outbox (destination, pending, attempted, max attempts, next attempt, error):",
              sy.psql("SELECT destination, count(*), count(*) FILTER (WHERE attempt_count > 0),"
                      " max(attempt_count), min(next_attempt_at), max(last_error) FROM"
                      " %s.outbox_messages WHERE processed_at IS NULL AND dead_at IS NULL"
                      " GROUP BY 1" % s), flush=True)
    for s in sy.ports:
        try:
            r = request(sy.ports[s], "GET", "/metrics", timeout=5)
        except OSError as e:
            print(s, "metrics:", e, flush=True)
            continue
        for line in r.body.decode().splitlines():
            if line.startswith(("saga_amqp_", "saga_broker_", "saga_outbox_", "saga_inbox_",
                                             "saga_peer_", "saga_dispatch")):
                print(s, line, flush=True)
    for i in range(NODES):
        q = cl.ctl(i, "list_queues", "-q", "--no-table-headers", "name", "messages_ready",
                   "messages_unacknowledged", "consumers", "leader", "members", "online")
        print("node %d queues (rc %d):\n%s%s" % (i + 1, q.returncode, q.stdout, q.stderr),
              flush=True)


def queue_members(cl):
    """{queue: number of members} as node 1 sees them ({} when it can't)."""
    q = cl.ctl(0, "list_queues", "-q", "--no-table-headers", "name", "members")
    if q.returncode != 0:
        return {}
    return {line.split()[0]: line.count("rabbit@") for line in q.stdout.splitlines()
            if line.strip()}


def node_log_tail(cl, i, lines=40):
    """The last lines of node i's own log file."""
    try:
        logs = sorted(glob.glob(os.path.join(cl.dirs[i], "log", "*.log")), key=os.path.getmtime)
        with open(logs[-1], encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except (OSError, IndexError):
        return "(no log)"


def running_nodes(cl, i):
    """The nodes node i sees running, as a list of names."""
    r = cl.ctl(i, "cluster_status", "--formatter", "json")
    try:
        return json.loads(r.stdout).get("running_nodes", []) if r.returncode == 0 else []
    except ValueError:
        return []


def link_events(sy, s, what):
    """How many "amqp: " lines of service s contain what."""
    try:
        with open(sy.log_path(s), encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if '"amqp: ' in line and what in line)
    except OSError:
        return 0


def amqp_log(sy):
    """What the links said: when each lost its node and where it went."""
    for s in sy.ports:
        try:
            with open(sy.log_path(s), encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if '"amqp: ' in line]
        except OSError:
            continue
        for line in lines[-12:]:
            print("%s: %s" % (s, line[:300]), flush=True)


def verify(cl, sy, client, pids, checks, rejoined):
    n, completed = verify_history(sy, client, pids, checks)
    q = cl.ctl(0, "list_queues", "-q", "--no-table-headers", "name", "messages", "type")
    dead_q = [line.split() for line in q.stdout.splitlines() if line.startswith("pgsaga.dead")]
    checks.ok(q.returncode == 0 and dead_q and dead_q[0][1] == "0",
              "pgsaga.dead is empty: %r" % q.stdout)
    checks.ok(q.returncode == 0 and all(line.split()[2] == "quorum"
                                        for line in q.stdout.splitlines() if line.strip()),
              "every queue is a quorum queue: %r" % q.stdout)
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
