"""Upgrade from the previous release (issue 19), suite 'upgrade'.

Builds the previous release (the newest before this one that CHANGELOG.md
names) from this repository's own history, in a git worktree cached in the
build tree, and then, on one
private PostgreSQL cluster:

  (a) a database that the previous release's binaries made and ran, with
      finished sagas and sagas waiting in the outbox (payment stopped, so
      their PayCommands wait), is taken over by this tree's binaries after
      this tree's sql/bootstrap.sql: the waiting sagas complete, the
      finished ones read back unchanged through GET /orders/{id}, the admin
      API and psql, and scripts/audit finds nothing; the previous release's
      payment then starts again on the upgraded schema and completes an
      order (old instances keep running during a rolling upgrade);
  (b) the upgraded database's `pg_dump --schema-only` equals that of a
      database this tree made from scratch, statements and columns sorted
      (a unified diff when not);
  (c) what migrate.c refuses and accepts: a schema of a newer major version
      (refused, both versions named), a migration recorded by a newer minor
      release (accepted), and, when the previous release is of an earlier
      major version (its schema adopted, not migrated), a database on which
      it applied only some of its migrations (refused, the missing ones
      named); from a release of the same major version (1.0.0 to 1.1.0),
      the orchestrator applies the migrations added since instead;
  (d) a rolling upgrade under load, over HTTP and again over RabbitMQ
      (TRANSPORT=amqp, a private node from scripts/rabbit-node): the
      previous release's three services, each given both its own instance's
      and its successor's address for every peer, are replaced one service
      at a time (payment,
      inventory, orchestrator: the new instance started next to the old one,
      which is then stopped with SIGTERM) while orders flow, 20 or more
      accepted at every step; every saga completes, one payment and one
      reservation each, and scripts/audit passes.

Why Python: the test drives two builds' binaries, psql and pg_dump and
compares text; the C harness (tests/support/harness.c) starts one build's
services. sagatest.core (tests/support) has the cluster, HTTP and process
helpers.

The cache: <build>/upgrade-cache/src-<commit> (a `git worktree add
--detach` of the commit) and build-<commit> (its meson build, the three
binaries only), reused while they exist. Run time: about 4 min with the
cache on 2 busy cores (1.5 min of it starting and stopping the RabbitMQ
node), plus 2-3 min to build the previous release the first time.
"""

import difflib
import os
import re
import shutil
import subprocess
import threading
import time

from sagatest.core import (BUILD, PEER_ENV, SRC, SERVICES, Checks, PgCluster, die, free_port,
                           request, service_env, spawn, stop_process, tail, wait_ready)


def refuse_partial(cluster, old_build, old_bootstrap, checks):
    """An earlier major release's database on which it applied only some of
    its migrations is refused, the missing ones named, and left as it was
    (0.9.0's migration names)."""
    partial = "partial"
    cluster.create_db(partial, old_bootstrap)
    q = Service(cluster, old_build, "payment", partial, {s: free_port() for s in SERVICES})
    q.start().wait_ready()
    q.stop()
    cluster.psql("DELETE FROM payment.schema_migrations"
                 " WHERE version IN ('006_pay_new_accounts.sql',"
                 " '008_refused_deliveries.sql')", db=partial)
    p = Service(cluster, BUILD, "payment", partial, {s: free_port() for s in SERVICES})
    rc = p.start().exit_status()
    log = open(p.log, encoding="utf-8", errors="replace").read()
    checks.ok(rc not in (0, None) and "006_pay_new_accounts.sql" in log
              and "008_refused_deliveries.sql" in log and PREVIOUS in log,
              "a partly migrated %s database is refused, the missing migrations named"
              " (exit %s):\n%s" % (PREVIOUS, rc, p.tail(5)))
    checks.ok(cluster.scalar("SELECT to_regclass('payment.schema_version')"
                             " IS NULL", db=partial) == "t",
              "the refused database is left as it was")


def previous_release():
    """The release this tree upgrades from, and its commit: the newest release
    CHANGELOG.md names other than this tree's own version (meson.build). A
    heading names its commit ("## 0.9.0 — commit 23169bd") or its tag ("## 1.0.0
    — the commit tagged `v1.0.0`"), so every release is checked against the one
    before it."""
    with open(os.path.join(SRC, "meson.build")) as f:
        m = re.search(r"version\s*:\s*'([0-9.]+)'", f.read())
    if not m:
        die("meson.build: no project version")
    current = m.group(1)
    with open(os.path.join(SRC, "CHANGELOG.md")) as f:
        for line in f:
            h = re.match(r"## ([0-9]+\.[0-9]+\.[0-9]+) — (?:commit ([0-9a-f]{7,40})"
                         r"|the commit tagged `(v[0-9.]+)`)", line)
            if not h or h.group(1) == current:
                continue
            if h.group(2):
                return h.group(1), h.group(2)
            r = subprocess.run(["git", "-C", SRC, "rev-parse", "--short=12",
                                h.group(3) + "^{commit}"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
            if r.returncode != 0:
                die("CHANGELOG.md: tag %s of release %s is not in the repository"
                    % (h.group(3), h.group(1)))
            return h.group(1), r.stdout.strip()
    die("CHANGELOG.md names no release before %s" % current)


PREVIOUS, PREVIOUS_COMMIT = previous_release()
# A release of an earlier major version made its schema with other
# migrations, which this tree adopts (migrate.c: adopt-<release>.sql); one of
# the same major version only lacks the migrations added since, which this
# tree applies.
with open(os.path.join(SRC, "meson.build")) as _f:
    CURRENT = re.search(r"version\s*:\s*'([0-9.]+)'", _f.read()).group(1)
ADOPTS = PREVIOUS.split(".")[0] != CURRENT.split(".")[0]

TOKEN = "upgrade-test-token"
ADMIN_TOKEN = "upgrade-test-admin-token-0123456789"
FINISHED = {"Completed", "Failed", "Compensated"}


def run(argv, cwd=None, env=None, check=True):
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        die("%s failed (%d):\n%s" % (" ".join(argv), r.returncode, r.stdout[-4000:]))
    return r


# --- the previous release's build ---------------------------------------------

def previous_build():
    """The previous release's build directory, built when missing."""
    if run(["git", "-C", SRC, "cat-file", "-e", PREVIOUS_COMMIT + "^{commit}"],
           check=False).returncode != 0:
        die("commit %s (pgsaga %s) is not in the repository at %s: the upgrade test "
            "builds it from the repository's history, so it needs a clone with the "
            "full history (git fetch --unshallow)" % (PREVIOUS_COMMIT, PREVIOUS, SRC))
    cache = os.path.join(BUILD, "upgrade-cache")
    src = os.path.join(cache, "src-" + PREVIOUS_COMMIT)
    build = os.path.join(cache, "build-" + PREVIOUS_COMMIT)
    os.makedirs(cache, exist_ok=True)
    if not os.path.exists(os.path.join(src, "meson.build")):
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(build, ignore_errors=True)
        add = ["git", "-C", SRC, "worktree", "add", "--detach", src, PREVIOUS_COMMIT]
        if run(add, check=False).returncode != 0:
            # registered still, its directory gone (a build tree deleted)
            run(["git", "-C", SRC, "worktree", "prune"])
            run(add)
    t = time.monotonic()
    targets = ["src/%s/saga-%s" % (s, s) for s in SERVICES]
    if os.path.exists(os.path.join(build, "build.ninja")):
        if run(["meson", "compile", "-C", build] + targets, check=False).returncode == 0:
            targets = None
        else:  # a cache left broken (moved, interrupted): made again
            shutil.rmtree(build)
    if targets:
        run(["meson", "setup", build], cwd=src)
        run(["meson", "compile", "-C", build] + targets)
    print("pgsaga %s (%s) built in %s (%.0f s)" % (PREVIOUS, PREVIOUS_COMMIT, build,
                                                   time.monotonic() - t), flush=True)
    return src, build


# --- a cluster with several databases, services of either build ---------------

class Cluster(PgCluster):
    """The private cluster, and every service process started on it (killed
    at the end)."""

    def __init__(self):
        super().__init__(os.path.join(BUILD, "tests", "upgrade-run-%d" % os.getpid()))
        self.procs = []

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        super().stop()


class Service:
    """One instance of a service of one build on one database."""

    def __init__(self, cluster, build, name, db, ports, env=None):
        self.cluster, self.build, self.name, self.db = cluster, build, name, db
        self.ports = ports  # service -> port, shared by the instances of a stack
        self.port = ports[name]
        self.extra = env or {}
        self.proc = None
        self.log = os.path.join(cluster.root, "%s-%s-%s-%d.log" % (
            db, name, os.path.basename(build), self.port))

    def env(self):
        env = service_env(self.name, self.cluster.url("saga_" + self.name, self.db),
                          "127.0.0.1:%d" % self.port, TOKEN,
                          {p: "http://127.0.0.1:%d" % port for p, port in self.ports.items()})
        env.update({
            "ADMIN_TOKEN": ADMIN_TOKEN,
            # deliveries that failed while a peer was down are retried soon,
            # and never given up on
            "RETRY_CAP_MS": "300",
            "RETRY_MAX_ATTEMPTS": "1000000",
            # a row claimed by an instance that stops is due again soon
            "LEASE_MS": "2000",
            "BREAKER_OPEN_MS": "300",
        })
        env.update(self.extra)
        return env

    def binary(self):
        return os.path.join(self.build, "src", self.name, "saga-" + self.name)

    def start(self):
        self.proc = spawn([self.binary()], self.env(), self.log)
        self.cluster.procs.append(self.proc)
        return self

    def wait_ready(self, timeout=60):
        wait_ready(self.proc, self.port, "saga-%s (%s)" % (self.name, self.build), self.log,
                   timeout)
        return self

    def exit_status(self, timeout=60):
        """For a start that must fail: its exit status (None if it runs on)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            return None

    def stop(self):
        stop_process(self.proc, timeout=20)

    def tail(self, n=40):
        return tail(self.log, n)


def stack(cluster, build, db, ports, only=SERVICES):
    svcs = {s: Service(cluster, build, s, db, ports).start() for s in only}
    for s in svcs.values():
        s.wait_ready()
    return svcs


def migrate_only(cluster, build, db):
    """Lets a build's services make (or upgrade) db's schemas, then stops them."""
    ports = {s: free_port() for s in SERVICES}
    for s in stack(cluster, build, db, ports).values():
        s.stop()


# --- the sagas ------------------------------------------------------------------

def order(port, key, customer, item, qty, amount):
    r = request(port, "POST", "/orders",
                {"customerId": customer, "itemId": item, "qty": qty, "amount": amount},
                {"Idempotency-Key": key})
    if r.status not in (200, 201, 202):
        die("POST /orders %s: %r" % (key, r))
    return r.json()["sagaId"]


def get_order(port, saga):
    r = request(port, "GET", "/orders/" + saga)
    if r.status != 200:
        die("GET /orders/%s: %r" % (saga, r))
    return r.json()


def admin_saga(port, saga):
    r = request(port, "GET", "/admin/api/sagas/" + saga,
                headers={"Authorization": "Bearer " + ADMIN_TOKEN})
    if r.status != 200:
        die("GET /admin/api/sagas/%s: %r" % (saga, r))
    return r.json()


# What psql shows of the finished sagas, in every schema; compared before and
# after the upgrade.
SNAPSHOT = [
    "SELECT saga_id, state, version, customer_id, item_id, qty, amount, compensation,"
    " deadline_at, trace_id, created_at, updated_at FROM orchestrator.saga_instances"
    " WHERE saga_id = ANY ('{%(ids)s}') ORDER BY saga_id",
    "SELECT saga_id, version, from_state, to_state, cause, message_id, at"
    " FROM orchestrator.saga_history WHERE saga_id = ANY ('{%(ids)s}')"
    " ORDER BY saga_id, version",
    "SELECT message_id, kind, destination, type, payload, trace_id, attempt_count,"
    " processed_at, dead_at, last_error, created_at FROM %(schema)s.outbox_messages"
    " WHERE lower(payload->>'sagaId') = ANY ('{%(ids)s}') ORDER BY message_id",
    "SELECT saga_id, customer_id, amount, status, reason, created_at, updated_at"
    " FROM payment.payments WHERE saga_id = ANY ('{%(ids)s}') ORDER BY saga_id",
    "SELECT saga_id, item_id, qty, status, reason, created_at, updated_at"
    " FROM inventory.reservations WHERE saga_id = ANY ('{%(ids)s}') ORDER BY saga_id",
]


def snapshot(cluster, db, ids):
    out = []
    for q in SNAPSHOT:
        for schema in SERVICES if "%(schema)s" in q else ("-",):
            rows = cluster.psql(q % {"ids": ",".join(ids), "schema": schema}, db=db)
            out.append("\n".join("\t".join(r) for r in rows))
    return out


# --- schema dumps -----------------------------------------------------------------

def normalised_dump(cluster, db):
    """pg_dump --schema-only of db as sorted statements, each table's columns
    sorted, with pg_dump's own comments and settings left out."""
    r = subprocess.run(["pg_dump", "--schema-only", "--no-tablespaces", "-d",
                        cluster.url(db=db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        die("pg_dump %s: %s" % (db, r.stderr))
    statements, cur = [], []
    for line in r.stdout.splitlines():
        if not cur and (line == "" or line.startswith(("--", "SET ", "\\"))
                        or line.startswith("SELECT pg_catalog.set_config")):
            continue
        cur.append(line)
        # pg_dump ends each statement with ';' at the end of a line, and
        # follows it with an empty line (also after a function's body)
        if line.endswith(";"):
            statements.append(cur)
            cur = []
    if cur:
        statements.append(cur)
    out = []
    for st in statements:
        if st[0].startswith("CREATE TABLE ") and st[-1] == ");":
            cols = sorted(c.rstrip(",") for c in st[1:-1])
            st = [st[0]] + ["    " + c.strip() + "," for c in cols] + [");"]
        out.append("\n".join(st))
    return sorted(out)


def dump_diff(a_name, a, b_name, b):
    return "\n".join(difflib.unified_diff("\n\n".join(a).splitlines(),
                                          "\n\n".join(b).splitlines(),
                                          a_name, b_name, lineterm="", n=3))


# --- (d) a rolling upgrade under load ------------------------------------------------

class Load:
    """Places orders one after another, each under its own Idempotency-Key,
    on whichever orchestrator instance answers: a key whose request got no
    answer (the instance stopping) is sent again, to the other one too,
    until one accepts it."""

    def __init__(self, ports):
        self.ports = ports  # orchestrator ports, tried in turn
        self.sagas = {}     # key -> sagaId
        self.errors = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        i = 0
        while not self.stopping.is_set():
            key = "roll-%d" % i
            end = time.monotonic() + 60
            while key not in self.sagas and time.monotonic() < end:
                for port in self.ports:
                    try:
                        r = request(port, "POST", "/orders",
                                    {"customerId": "c-roll-%d" % (i % 7), "itemId": "R1",
                                     "qty": 1, "amount": 100},
                                    {"Idempotency-Key": key}, timeout=10)
                    except OSError:
                        continue
                    if r.status in (200, 201, 202):
                        self.sagas[key] = r.json()["sagaId"]
                        break
                else:
                    time.sleep(0.05)
            if key not in self.sagas:
                self.errors.append("%s: no orchestrator accepted it in 60 s" % key)
                return
            i += 1
            time.sleep(0.02)

    def wait_for(self, more, timeout=120):
        """Until `more` further orders are accepted."""
        want = len(self.sagas) + more
        end = time.monotonic() + timeout
        while len(self.sagas) < want and time.monotonic() < end and not self.errors:
            time.sleep(0.05)
        return len(self.sagas) >= want


def rabbit_node(cluster):
    """A private RabbitMQ node (scripts/rabbit-node) for the amqp run; its
    URL. Destroyed with the cluster's run directory (see main)."""
    node = os.path.join(cluster.root, "rabbit")
    for _ in range(5):
        r = run([os.path.join(SRC, "scripts", "rabbit-node"), "start", node, str(free_port())],
                check=False)
        if r.returncode == 0:
            return node, r.stdout.strip().splitlines()[-1]
    die("scripts/rabbit-node start failed:\n" + r.stdout[-3000:])


def rolling_upgrade(cluster, old_build, old_bootstrap, new_bootstrap, checks, phase,
                    transport="http", amqp_url=None):
    db = "rolling_" + transport
    cluster.create_db(db, old_bootstrap)
    old_ports = {s: free_port() for s in SERVICES}
    new_ports = {s: free_port() for s in SERVICES}
    # every instance knows both instances of each peer: the one not running
    # is skipped
    peers = {PEER_ENV[p]: "http://127.0.0.1:%d,http://127.0.0.1:%d" % (old_ports[p], new_ports[p])
             for p in SERVICES}
    if transport == "amqp":
        peers.update({"TRANSPORT": "amqp", "AMQP_URL": amqp_url})
    old = {s: Service(cluster, old_build, s, db, old_ports, peers).start() for s in SERVICES}
    for svc in old.values():
        svc.wait_ready()
    cluster.psql("INSERT INTO payment.accounts (customer_id, balance)"
                 " SELECT 'c-roll-' || i, 100000000 FROM generate_series(0, 6) i;"
                 " INSERT INTO inventory.stock (item_id, available) VALUES ('R1', 1000000)", db=db)
    load = Load([old_ports["orchestrator"], new_ports["orchestrator"]])
    load.thread.start()
    try:
        checks.ok(load.wait_for(20), "%s: orders flow through %s" % (transport, PREVIOUS))
        cluster.psql_file(new_bootstrap, db=db)
        for s in ("payment", "inventory", "orchestrator"):
            Service(cluster, BUILD, s, db, new_ports, peers).start().wait_ready()
            checks.ok(load.wait_for(20), "%s: orders flow with both %ss" % (transport, s))
            old[s].stop()
            checks.ok(old[s].proc.returncode == 0, "%s's saga-%s exits 0 on SIGTERM (%s)" % (
                PREVIOUS, s, old[s].proc.returncode))
            checks.ok(load.wait_for(20), "%s: orders flow after %s's saga-%s stopped" % (
                transport, PREVIOUS, s))
            phase("rolling upgrade over %s: %s replaced, %d orders so far" % (
                transport, s, len(load.sagas)))
    finally:
        load.stopping.set()
        load.thread.join(timeout=90)
    checks.ok(not load.errors, "every order accepted: %s" % load.errors)
    n = len(load.sagas)
    ids = ",".join(load.sagas.values())
    checks.ok(len(set(load.sagas.values())) == n, "one saga per Idempotency-Key")
    checks.ok(cluster.wait_sql("SELECT count(*) FROM orchestrator.saga_instances"
                               " WHERE state = 'Completed' AND saga_id = ANY ('{%s}')" % ids,
                               str(n), timeout=120, db=db),
              "%s: all %d sagas of the rolling upgrade complete" % (transport, n))
    checks.ok(cluster.scalar("SELECT count(*) FROM orchestrator.saga_instances", db=db) == str(n),
              "no saga besides the %d orders" % n)
    effects = cluster.psql("SELECT (SELECT count(*) FROM payment.payments"
                           " WHERE status = 'captured'),"
                           " (SELECT count(*) FROM inventory.reservations"
                           " WHERE status = 'reserved'),"
                           " (SELECT sum(starting_balance - balance) FROM payment.accounts),"
                           " (SELECT sum(starting_stock - available) FROM inventory.stock)", db=db)
    checks.ok(effects == [[str(n), str(n), str(100 * n), str(n)]],
              "one payment and one reservation per saga, charged and reserved once (%r)"
              % effects)
    audit = run([os.path.join(SRC, "scripts", "audit"), cluster.url("saga_auditor", db)],
                check=False)
    checks.ok(audit.returncode == 0, "%s: scripts/audit passes after the rolling upgrade:\n"
              % transport + audit.stdout[-3000:])
    print("rolling upgrade over %s: %d sagas carried across, all Completed" % (transport, n),
          flush=True)


# --- the test -----------------------------------------------------------------------

def main():
    started = time.monotonic()

    def phase(what):
        print("%6.1f s  %s" % (time.monotonic() - started, what), flush=True)

    checks = Checks("upgrade")
    old_src, old_build = previous_build()
    old_bootstrap = os.path.join(old_src, "sql", "bootstrap.sql")
    new_bootstrap = os.path.join(SRC, "sql", "bootstrap.sql")
    cluster = Cluster()
    node = None
    try:
        cluster.start()
        phase("previous release built, cluster up")
        carried = "carried"
        cluster.create_db(carried, old_bootstrap)

        # (a) the previous release makes and runs the database
        ports = {s: free_port() for s in SERVICES}
        old = stack(cluster, old_build, carried, ports)
        cluster.psql("INSERT INTO payment.accounts (customer_id, balance)"
                     " VALUES ('c-rich', 1000000), ('c-poor', 10);"
                     " INSERT INTO inventory.stock (item_id, available)"
                     " VALUES ('A1', 1000)", db=carried)
        finished = []
        phase("%s running" % PREVIOUS)
        for i in range(6):
            finished.append(order(ports["orchestrator"], "done-%d" % i, "c-rich", "A1", 1, 100))
        for i in range(2):  # declined: Failed
            finished.append(order(ports["orchestrator"], "poor-%d" % i, "c-poor", "A1", 1, 5000))
        for i in range(2):  # unknown item: refunded, Compensated
            finished.append(order(ports["orchestrator"], "none-%d" % i, "c-rich", "NOPE", 1, 100))
        checks.ok(cluster.wait_sql("SELECT count(*) FROM orchestrator.saga_instances"
                                   " WHERE state NOT IN ('Completed', 'Failed', 'Compensated')",
                                   "0", timeout=60, db=carried),
                  "%s: the first sagas finish" % PREVIOUS)
        states = cluster.psql("SELECT state, count(*) FROM orchestrator.saga_instances"
                              " GROUP BY state ORDER BY state", db=carried)
        checks.ok(states == [["Compensated", "2"], ["Completed", "6"], ["Failed", "2"]],
                  "%s: 6 Completed, 2 Failed, 2 Compensated (%r)" % (PREVIOUS, states))
        before_api = {s: get_order(ports["orchestrator"], s) for s in finished}
        before_sql = snapshot(cluster, carried, finished)

        phase("%d sagas finished" % len(finished))
        # sagas waiting in the outbox: payment is down, their PayCommands wait
        old["payment"].stop()
        waiting = [order(ports["orchestrator"], "wait-%d" % i, "c-rich", "A1", 2, 300)
                   for i in range(5)]
        checks.ok(cluster.wait_sql("SELECT count(*) FROM orchestrator.outbox_messages"
                                   " WHERE type = 'PayCommand' AND processed_at IS NULL"
                                   " AND dead_at IS NULL AND attempt_count > 0", "5",
                                   timeout=60, db=carried),
                  "%s: 5 PayCommands waiting, tried at least once" % PREVIOUS)
        old["orchestrator"].stop()
        old["inventory"].stop()
        print("carried across: %d finished sagas, %d waiting in the outbox" % (
            len(finished), len(waiting)), flush=True)

        phase("%s stopped" % PREVIOUS)
        # the upgrade: the new bootstrap, then the new binaries
        cluster.psql_file(new_bootstrap, db=carried)
        new = stack(cluster, BUILD, carried, ports)
        phase("this tree's binaries ready")
        for s in SERVICES if ADOPTS else ():
            adopted = "adopted the schema of pgsaga %s" % PREVIOUS
            checks.ok(adopted in open(new[s].log, encoding="utf-8", errors="replace").read(),
                      "saga-%s logs that it %s" % (s, adopted))
        if not ADOPTS:
            # the orchestrator applied what this release added (sagas defined as data)
            added = cluster.scalar("SELECT count(*) FROM orchestrator.schema_migrations"
                                   " WHERE version >= '006'", db=carried)
            checks.ok(added not in (None, "0"), "saga-orchestrator applied the migrations"
                      " added since %s (%s)" % (PREVIOUS, added))
        checks.ok(cluster.wait_sql("SELECT count(*) FROM orchestrator.saga_instances"
                                   " WHERE state = 'Completed' AND saga_id = ANY ('{%s}')"
                                   % ",".join(waiting), "5", timeout=60, db=carried),
                  "the 5 waiting sagas complete under the new binaries")
        for s in waiting:
            o = get_order(ports["orchestrator"], s)
            checks.ok(o.get("state") == "Completed", "GET /orders/%s: Completed (%r)" % (s, o))
        changed = [s for s in finished if get_order(ports["orchestrator"], s) != before_api[s]]
        checks.ok(not changed, "the %d finished sagas read back unchanged through GET /orders"
                  " (changed: %s)" % (len(finished), changed))
        after_sql = snapshot(cluster, carried, finished)
        checks.ok(after_sql == before_sql,
                  "the finished sagas' rows read back unchanged through psql:\n" + "\n".join(
                      dump_diff("before", [b], "after", [a])
                      for b, a in zip(before_sql, after_sql) if a != b))
        for s in finished[:3] + waiting[:1]:
            a = admin_saga(ports["orchestrator"], s)
            checks.ok(a.get("sagaId") == s and a.get("history"),
                      "GET /admin/api/sagas/%s shows the saga and its history" % s)
        one_effect = cluster.psql("SELECT count(*) FILTER (WHERE status = 'captured'),"
                                  " count(*) FROM payment.payments WHERE saga_id ="
                                  " ANY ('{%s}')" % ",".join(waiting), db=carried)
        checks.ok(one_effect == [["5", "5"]], "one captured payment per waiting saga (%r)"
                  % one_effect)
        audit = run([os.path.join(SRC, "scripts", "audit"),
                     cluster.url("saga_auditor", carried)], check=False)
        checks.ok(audit.returncode == 0, "scripts/audit passes on the upgraded database:\n"
                  + audit.stdout[-3000:])

        phase("taken over")
        # an old instance still starts on the upgraded schema and works beside
        new["payment"].stop()
        back = Service(cluster, old_build, "payment", carried, ports).start().wait_ready()
        late = order(ports["orchestrator"], "late-0", "c-rich", "A1", 1, 100)
        checks.ok(cluster.wait_sql("SELECT state FROM orchestrator.saga_instances"
                                   " WHERE saga_id = '%s'" % late, "Completed",
                                   timeout=60, db=carried),
                  "pgsaga %s's payment starts again on the upgraded schema and pays" % PREVIOUS)
        back.stop()
        for s in new.values():
            s.stop()

        phase("old payment beside the new ones")
        # (b) the same schema as a database made from scratch
        fresh = "fresh"
        cluster.create_db(fresh, new_bootstrap)
        migrate_only(cluster, BUILD, fresh)
        a, b = normalised_dump(cluster, carried), normalised_dump(cluster, fresh)
        checks.ok(a == b, "pg_dump --schema-only of the upgraded database equals that of a"
                  " fresh one:\n" + dump_diff("upgraded", a, "fresh", b))
        print("schema dumps compared: %d statements" % len(a), flush=True)

        phase("schemas compared")
        # (c) what a binary refuses and accepts
        cluster.psql("UPDATE payment.schema_version SET major = major + 1", db=fresh)
        newer = cluster.scalar("SELECT major FROM payment.schema_version", db=fresh)
        ours = str(int(newer) - 1)
        p = Service(cluster, BUILD, "payment", fresh, {s: free_port() for s in SERVICES}).start()
        rc = p.exit_status()
        log = open(p.log, encoding="utf-8", errors="replace").read()
        checks.ok(rc not in (0, None) and "major version %s" % newer in log
                  and "major version %s" % ours in log,
                  "a schema of a newer major version is refused, both versions named"
                  " (exit %s):\n%s" % (rc, p.tail(5)))
        cluster.psql("UPDATE payment.schema_version SET major = major - 1;"
                     " INSERT INTO payment.schema_migrations (version)"
                     " VALUES ('900_from_a_newer_minor.sql')", db=fresh)
        p = Service(cluster, BUILD, "payment", fresh, {s: free_port() for s in SERVICES})
        p.start().wait_ready()
        p.stop()
        checks.ok("900_from_a_newer_minor.sql" in open(p.log, encoding="utf-8").read(),
                  "a migration of a newer minor release is accepted, and logged")

        if ADOPTS:
            refuse_partial(cluster, old_build, old_bootstrap, checks)
        phase("refusals checked")

        rolling_upgrade(cluster, old_build, old_bootstrap, new_bootstrap, checks, phase)
        node, amqp_url = rabbit_node(cluster)
        phase("RabbitMQ node up")
        rolling_upgrade(cluster, old_build, old_bootstrap, new_bootstrap, checks, phase,
                        "amqp", amqp_url)
        phase("rolling upgrades done")
    finally:
        if node:
            run([os.path.join(SRC, "scripts", "rabbit-node"), "destroy", node], check=False)
        cluster.stop()
    print("upgrade test: %.0f s" % (time.monotonic() - started), flush=True)
    checks.done()


if __name__ == "__main__":
    main()
