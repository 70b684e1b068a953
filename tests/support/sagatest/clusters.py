"""What runs on the hosts of the hosts suite, shared by its tests: the
hosts themselves (scripts/hosts) with a watchdog that destroys what was
started on them, a RabbitMQ cluster (scripts/rabbit-node), a Patroni
cluster (scripts/patroni-node), a plain PostgreSQL (scripts/pg-cluster)
and the services (HostsSystem: core's System with its database on the
hosts and, when asked, each service instance on a host of its own).

Standard library only; builds on hosts and core.
"""

import glob
import json
import os
import shutil
import signal
import time
import urllib.request

from .core import SRC, System, binary, die, request, spawn
from .hosts import (HOSTS, PSQL_TIMEOUT_S, in_netns, log, log_event, readyz, run, setns,
                    together, wait, wait_progress)

RABBIT = os.path.join(SRC, "scripts", "rabbit-node")
PATRONI = os.path.join(SRC, "scripts", "patroni-node")
PG = os.path.join(SRC, "scripts", "pg-cluster")
COOKIE = "PGSAGAHOSTSTEST"


def addr(host):
    return "10.77.0.%d" % host


class Hosts:
    """Hosts 1..n under root/hosts. What runs on them registers itself
    (keep) before up(): the watchdog that up() starts destroys it when
    this test is SIGKILLed, and down() destroys it, then the hosts. As a
    context manager: up() at the start; at the end, this process back in
    the machine's network namespace, down(), and root removed (kept with
    OPS_KEEP_RUN=1)."""

    def __init__(self, root, n):
        self.root = root
        self.dir = os.path.join(root, "hosts")
        self.n = n
        self.kept = []  # (script, directory) for `script destroy directory`
        # the machine's network namespace, to come back to (enter)
        self.home = os.open("/proc/self/ns/net", os.O_RDONLY)

    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        setns("/proc/self/fd/%d" % self.home)
        self.down()
        if os.environ.get("OPS_KEEP_RUN") != "1":
            shutil.rmtree(self.root, ignore_errors=True)
        return False

    def keep(self, script, d):
        self.kept.append((script, d))

    def up(self):
        run(HOSTS, "up", self.dir, str(self.n))
        run(HOSTS, "watch", self.dir, str(os.getpid()), "bash", "-c",
            'while [ $# -ge 2 ]; do "$1" destroy "$2"; shift 2; done', "destroy",
            *[x for pair in self.kept for x in pair])

    def on(self, host, *args, **kw):
        return run(HOSTS, "run", self.dir, str(host), *args, **kw)

    def ns(self, host):
        return "/run/netns/" + run(HOSTS, "ns", self.dir, str(host)).stdout.strip()

    def enter(self, host):
        """Moves this process onto the host (scripts/hosts run still
        reaches every host from there)."""
        setns(self.ns(host))

    def partition(self, host, *others):
        run(HOSTS, "partition", self.dir, str(host), *[str(o) for o in others])

    def heal(self, host):
        run(HOSTS, "heal", self.dir, str(host))

    def down(self):
        # together: a RabbitMQ node's destroy is a graceful stop, seconds each
        together(*[lambda script=script, d=d: run(script, "destroy", d, check=False)
                   for script, d in self.kept])
        run(HOSTS, "down", self.dir, check=False)


class RabbitCluster:
    """RabbitMQ nodes on the given hosts, one each, AMQP on 5672: a cluster
    (pause_minority) when there are several, else a single node."""

    def __init__(self, hosts, on_hosts):
        self.hosts = hosts
        self.on_hosts = list(on_hosts)
        self.dirs = [os.path.join(hosts.root, "rabbit%d" % (i + 1))
                     for i in range(len(self.on_hosts))]
        self.addrs = [addr(h) for h in self.on_hosts]
        for d in self.dirs:
            hosts.keep(RABBIT, d)

    def node_env(self, i):
        env = dict(os.environ, RABBIT_NODE_IP=self.addrs[i])
        if len(self.addrs) > 1:
            env.update(RABBIT_CLUSTER=" ".join(self.addrs), RABBIT_COOKIE=COOKIE)
        return env

    def start(self, i):
        self.hosts.on(self.on_hosts[i], RABBIT, "start", self.dirs[i], "5672",
                      env=self.node_env(i))

    def start_all(self, at_once=False):
        """The first node forms the cluster, the others join it (classic
        discovery), one after the other: two nodes booting at once while
        the first is not up yet may each pick the other, half-started, to
        join. With at_once, the others start together once the first is
        up: each tries the listed nodes in order, and joins the first, the
        one that answers."""
        self.start(0)
        rest = [lambda i=i: self.start(i) for i in range(1, len(self.dirs))]
        if at_once:
            together(*rest)
        else:
            for start in rest:
                start()

    def kill(self, i):
        self.hosts.on(self.on_hosts[i], RABBIT, "kill", self.dirs[i])

    def kill_node_of(self, sy, s, checks):
        """SIGKILLs the node service instance s is connected to and waits
        for s to be connected to another. Returns {victim: the node's
        index, lost: when s's connection broke (epoch), moved: the node it
        moved to, moved_after_s: from the break to its new connection,
        after_kill_s: from the kill's return to /readyz naming the new
        node}."""
        node = readyz(sy, s).get("brokerNode")
        victim = self.index(node)
        checks.ok(victim is not None, "/readyz names a node of the cluster: %r" % node)
        victim = victim or 0
        log("SIGKILL of the RabbitMQ node on %s (%s's)" % (self.addrs[victim], s))
        before = time.time()
        self.kill(victim)
        # from when the kill returned: the node's processes are all gone by then
        t0 = time.monotonic()
        moved = wait(lambda: (lambda r: r.get("broker") == "up" and r.get("brokerNode") != node
                              and r.get("brokerNode"))(readyz(sy, s)), 120, 0.2)
        after_kill = time.monotonic() - t0
        checks.ok(moved, "%s moves to another node after the SIGKILL" % s)
        # the node died when the connection broke (a socket error, not a
        # close): the kill command itself may take seconds on a busy machine
        lost = wait(lambda: log_event(sy, s, "amqp: connection lost", before), 30, 0.5)
        checks.ok(lost is not None, "%s's log tells when its connection broke" % s)
        lost = lost or before
        again = log_event(sy, s, "amqp: connected to", lost)
        return {"victim": victim, "lost": lost, "moved": moved, "after_kill_s": after_kill,
                "moved_after_s": round(again - lost, 1) if again else None}

    def stop(self, i):
        self.hosts.on(self.on_hosts[i], RABBIT, "stop", self.dirs[i])

    def ctl(self, i, *args):
        return self.hosts.on(self.on_hosts[i], RABBIT, "ctl", self.dirs[i], *args,
                             check=False, timeout=120)

    def urls(self):
        return ",".join("amqp://guest:guest@%s:5672/%%2f" % a for a in self.addrs)

    def index(self, node):
        """The index of node (address:5672, as /readyz's brokerNode), or None."""
        for i, a in enumerate(self.addrs):
            if node == a + ":5672":
                return i
        return None

    def running_nodes(self, i):
        """The nodes node i sees running, as a list of names."""
        r = self.ctl(i, "cluster_status", "--formatter", "json")
        try:
            return json.loads(r.stdout).get("running_nodes", []) if r.returncode == 0 else []
        except ValueError:
            return []

    def whole(self, i):
        """True when node i sees every node running."""
        return len(self.running_nodes(i)) == len(self.addrs)

    def queue_members(self):
        """{queue: number of members} as node 1 sees them ({} when it can't)."""
        q = self.ctl(0, "list_queues", "-q", "--no-table-headers", "name", "members")
        if q.returncode != 0:
            return {}
        return {line.split()[0]: line.count("rabbit@") for line in q.stdout.splitlines()
                if line.strip()}

    def queues_everywhere(self, checks):
        """The check after the services declared their queues: each has a
        member on every node."""
        n = len(self.addrs)
        ok = wait(lambda: (lambda m: m and all(k == n for k in m.values()))(self.queue_members()),
                  60, 1)
        checks.ok(ok, "every queue has a member on each node: %r" % self.queue_members())

    def queue_leader(self, name):
        """The node (rabbit@address) leading queue name, or None."""
        for i in range(len(self.dirs)):
            q = self.ctl(i, "list_queues", "-q", "--no-table-headers", "name", "leader")
            for line in q.stdout.splitlines() if q.returncode == 0 else []:
                f = line.split()
                if len(f) == 2 and f[0] == name:
                    return f[1]
        return None

    def queues(self, i=0):
        """Node i's list_queues as (ok, rows of name, messages, type, text)."""
        q = self.ctl(i, "list_queues", "-q", "--no-table-headers", "name", "messages", "type")
        rows = [line.split() for line in q.stdout.splitlines() if line.strip()]
        return q.returncode == 0, rows, q.stdout + q.stderr

    def dead_letters_checked(self, checks, i=0):
        """The check every test makes: pgsaga.dead is empty."""
        ok, rows, text = self.queues(i)
        dead = [r for r in rows if r[0] == "pgsaga.dead"]
        checks.ok(ok and dead and dead[0][1] == "0", "pgsaga.dead is empty: %r" % text)
        return ok, rows, text

    def log_tail(self, i, lines=40):
        """The last lines of node i's own log file (scripts/rabbit-node keeps
        it in DIR/node/log/)."""
        try:
            logs = sorted(glob.glob(os.path.join(self.dirs[i], "node", "log", "*.log")),
                          key=os.path.getmtime)
            with open(logs[-1], encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except (OSError, IndexError):
            return "(no log)"


class PatroniCluster:
    """An etcd member and Patroni with PostgreSQL on each of the given
    hosts (scripts/patroni-node), members db1, db2, ... in that order."""

    def __init__(self, hosts, on_hosts):
        self.hosts = hosts
        self.on_hosts = list(on_hosts)
        self.n = len(self.on_hosts)
        self.dirs = [os.path.join(hosts.root, "db%d" % (i + 1)) for i in range(self.n)]
        self.addrs = [addr(h) for h in self.on_hosts]
        for d in self.dirs:
            hosts.keep(PATRONI, d)

    def start(self, i):
        env = dict(os.environ, PATRONI_NODE_IP=self.addrs[i],
                   PATRONI_CLUSTER=" ".join(self.addrs), PATRONI_NAME="db%d" % (i + 1),
                   PGSAGA_FAST="1")
        self.hosts.on(self.on_hosts[i], PATRONI, "start", self.dirs[i], env=env)

    def start_all(self):
        """The members start together: each waits for etcd's majority."""
        together(*[lambda i=i: self.start(i) for i in range(self.n)])

    def index(self, name):
        return int(name[2:]) - 1

    def members(self, via=None):
        """The cluster as a member's REST API sees it (GET /cluster), as
        {name: (role, state, timeline)}: roles leader, sync_standby, replica.
        Asked of the members in turn, `via` first; {} when none answers."""
        order = [via] if via is not None else []
        order += [i for i in range(self.n) if i not in order]
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
        """(leader, sync standby) when all run, one the leader and the
        others streaming from it, one of them synchronously; else None."""
        ms = self.members(via)
        if len(ms) != self.n or any(s != "running" for _, s, _ in ms.values()):
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
        if r.returncode != 0 or r.stdout.split() != [str(self.n - 1), "1"]:
            return None
        return leaders[0], syncs[0]

    def wait_up(self, timeout=300):
        """(leader, sync standby) once the new cluster is healthy; the test
        ends (die) when it is not within timeout seconds."""
        pair = wait(self.healthy, timeout, 1)
        if not pair:
            print(json.dumps(self.members()), flush=True)
            die("the Patroni cluster is not up with a synchronous standby after %d s" % timeout)
        return pair

    def leader(self, via=None):
        ms = self.members(via)
        leaders = [n for n, (r, s, _) in ms.items() if r == "leader" and s == "running"]
        return leaders[0] if len(leaders) == 1 else None

    def ctl(self, i, *args, check=False):
        return self.hosts.on(self.on_hosts[i], PATRONI, "ctl", self.dirs[i], *args,
                             check=check, timeout=120)

    def kill_postgres(self, i):
        self.hosts.on(self.on_hosts[i], PATRONI, "kill", self.dirs[i], "postgres")

    def in_recovery(self, i):
        """'t' or 'f' from member i's own server, None when it does not
        answer (asked from this process's host)."""
        r = run("psql", "-X", "-At", "-d", "host=%s port=5432 dbname=postgres user=postgres"
                " connect_timeout=3" % self.addrs[i], "-c", "SELECT pg_is_in_recovery()",
                check=False, timeout=20)
        return r.stdout.strip() if r.returncode == 0 else None

    def log_events(self, i, lines=60):
        """The last lines of member i's Patroni log that say something
        (its loop's "no action" and PostgreSQL's own lines left out): what
        a failed check prints, since the member's files go with the test."""
        try:
            with open(os.path.join(self.dirs[i], "node", "patroni.log"),
                      encoding="utf-8", errors="replace") as f:
                said = [ln for ln in f if ln[19:20] == "," and "no action" not in ln
                        and "Lock owner" not in ln]
        except OSError:
            return "(no log)"
        return "".join(said[-lines:])

    def explain(self, checks):
        """After a failed check: what each member's Patroni did last."""
        if not checks.failed:
            return
        for i in range(self.n):
            print("--- Patroni on db%d, its last events:\n%s" % (i + 1, self.log_events(i)),
                  flush=True)

    def url(self, role, db="pgsaga"):
        return ("host=%s port=%s dbname=%s user=%s target_session_attrs=read-write"
                " connect_timeout=5" % (",".join(self.addrs), ",".join(["5432"] * self.n),
                                        db, role))

    def wait_whole(self, checks, what, timeout=240):
        """The old primary back as a standby and a synchronous standby
        again: (leader, sync standby), or None (a failed check)."""
        pair = wait(self.healthy, timeout, 1)
        checks.ok(pair is not None, "%s: the %d members run again, one a synchronous standby"
                  % (what, self.n))
        if pair is None:
            print(json.dumps(self.members()), flush=True)
        return pair

    def failover(self, client, checks, what, t0, old, want_new, results, timeout=180):
        """After a fault at t0 (monotonic) that takes the primary `old`
        away: waits for another leader (want_new, when known) and for
        orders to go through it; records under results[what] the new
        leader, the first order committed on it and the longest stretch
        without a 201 (both from t0), and the orders answered otherwise."""
        others = [i for i in range(self.n) if i != self.index(old)]
        new = wait(lambda: (lambda n: n if n and n != old else None)(self.leader(others[0])),
                   timeout, 0.5)
        checks.ok(new is not None, "%s: another member becomes the leader" % what)
        if want_new:
            checks.ok(new == want_new, "%s: the synchronous standby %s is promoted (the new"
                      " leader: %s)" % (what, want_new, new))
        checks.ok(wait_progress(client, 20, timeout), "%s: orders are accepted after it" % what)
        t1 = time.monotonic()
        # the outage is the longest stretch without a 201; the 201 that ends
        # it is the first order committed on the new primary (a request begun
        # after the fault may still commit on the old one: a SIGKILLed
        # postmaster's backends finish what they are doing)
        gap, end = client.longest_gap(t0, t1)
        res = {"new_leader": new, "first_commit_s": round(end - t0, 1),
               "longest_gap_s": round(gap, 1), "errors": client.errors_between(t0 - 1, t1)}
        results[what] = res
        log("%s: %s -> %s; first order committed on the new primary %.1f s after the %s,"
            " longest stretch without a 201 %.1f s, %d orders answered otherwise"
            % (what, old, new, end - t0, "command" if what == "switchover" else "fault", gap,
               res["errors"]))
        return new


class PgNode:
    """A plain PostgreSQL on one host, listening on its address on 5432
    (scripts/pg-cluster, PG_NODE_IP)."""

    def __init__(self, hosts, host):
        self.hosts = hosts
        self.host = host
        self.dir = os.path.join(hosts.root, "pg")
        hosts.keep(PG, self.dir)

    def start(self):
        self.hosts.on(self.host, PG, "start", self.dir, "5432",
                      env=dict(os.environ, PGSAGA_FAST="1", PG_NODE_IP=addr(self.host)))

    def url(self, role, db="pgsaga"):
        return "host=%s port=5432 dbname=%s user=%s connect_timeout=5" % (
            addr(self.host), db, role)


class HostsSystem(System):
    """core's System with its database on the hosts (db: a PgNode or a
    PatroniCluster; with bootstrap, the database is made and bootstrapped
    here, as for a PgNode) and every psql bounded (PSQL_TIMEOUT_S).

    With instances (name -> (service, host, port)) each instance runs in its
    host's network namespace, listening on the host's address; the peers'
    URLs list every instance of a service; env is added to every instance's
    settings (TRANSPORT, AMQP_URL, LEASE_MS, ...). Without, the three
    services run on this process's host as System runs them, env per
    service as System takes it."""

    def __init__(self, name, root, db, hosts=None, instances=None, env=None, bootstrap=False):
        super().__init__(name, env=None if instances else env, psql_timeout=PSQL_TIMEOUT_S)
        self.root = os.path.join(root, "services")
        self.dbs = db
        self.db = "pgsaga"
        self.pg_port = 5432
        self.bootstrap_here = bootstrap
        self.instances = instances
        self.common_env = env if instances else {}
        if instances:
            self.ports = {i: port for i, (_, _, port) in instances.items()}
            self.netns = {i: hosts.ns(host) for i, (_, host, _) in instances.items()}

    def url(self, role=None, db=None):
        return self.dbs.url(role or "postgres", db or self.db)

    def addr(self, s):
        return addr(self.instances[s][1]) if self.instances else super().addr(s)

    def start(self):
        os.makedirs(self.root, exist_ok=True)
        if self.bootstrap_here:
            self.psql("CREATE DATABASE %s" % self.db, db="postgres")
            self.psql_file(os.path.join(SRC, "sql", "bootstrap.sql"))
        for s in self.ports:
            self.start_service(s)
        for s in self.ports:
            self.wait_ready(s, timeout=120)

    def urls(self, service):
        return ",".join("http://%s:%d" % (addr(h), p) for (sv, h, p) in self.instances.values()
                        if sv == service)

    def service_env(self, s):
        if not self.instances:
            return super().service_env(s)
        service = self.instances[s][0]
        env = super().service_env(service)
        env.update({
            "LISTEN_ADDR": "%s:%d" % (self.addr(s), self.ports[s]),
            "ORCHESTRATOR_URL": self.urls("orchestrator"),
            "PAYMENT_URL": self.urls("payment"),
            "INVENTORY_URL": self.urls("inventory"),
        })
        env.update(self.common_env)
        return env

    def stop(self):
        # every instance is told at once; System.stop then waits for each
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        super().stop()

    def start_service(self, s):
        if not self.instances:
            super().start_service(s)
            return
        self.procs[s] = spawn([binary(self.instances[s][0])], self.service_env(s),
                              self.log_path(s), preexec_fn=in_netns(self.netns[s]))


def diagnose(sy, rabbit):
    """What a stall looks like: where the sagas wait, what the outboxes
    hold, what the links say and what each node's queues hold."""
    try:
        print(sy.psql("SELECT state, count(*), min(created_at), max(updated_at) FROM"
                      " orchestrator.saga_instances GROUP BY 1 ORDER BY 2 DESC"), flush=True)
        for s in ("orchestrator", "payment", "inventory"):
            print(s, "outbox (destination, pending, attempted, max attempts, next attempt,"
                  " error):",
                  sy.psql("SELECT destination, count(*), count(*) FILTER (WHERE attempt_count"
                          " > 0), max(attempt_count), min(next_attempt_at), max(last_error)"
                          " FROM %s.outbox_messages WHERE processed_at IS NULL AND dead_at IS"
                          " NULL GROUP BY 1" % s), flush=True)
    except RuntimeError as e:
        print("the database did not answer: %s" % e, flush=True)
    for s in sy.ports:
        try:
            r = request(sy.ports[s], "GET", "/metrics", timeout=5, host=sy.addr(s))
        except OSError as e:
            print(s, "metrics:", e, flush=True)
            continue
        for line in r.body.decode().splitlines():
            if line.startswith(("saga_amqp_", "saga_broker_", "saga_outbox_", "saga_inbox_",
                                "saga_peer_", "saga_dispatch")):
                print(s, line, flush=True)
    for i in range(len(rabbit.dirs)):
        q = rabbit.ctl(i, "list_queues", "-q", "--no-table-headers", "name", "messages_ready",
                       "messages_unacknowledged", "consumers", "leader", "members", "online")
        print("node %d queues (rc %d):\n%s%s" % (i + 1, q.returncode, q.stdout, q.stderr),
              flush=True)
