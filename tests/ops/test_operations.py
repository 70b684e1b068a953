#!/usr/bin/python3
"""docs/operations.md: every ```sql block runs without an error against a
database where sagas ran, and a ```yaml block of Prometheus rules, if one
comes back, passes `promtool check rules` (the rules themselves are a file,
deploy/prometheus/pgsaga-rules.yml, checked by the deploy suite).

The database is bootstrapped with docker/initdb.sh (the script the compose
file mounts into the postgres image), so that script is exercised too. The
data the recipes run on: completed sagas, a failed one (declined), a
compensated one (no stock), one stuck in PendingInventory (inventory fails
on purpose) and a dead letter (an event for a saga that does not exist).

A block runs as saga_auditor (read-only) unless its first line is
`-- as: superuser`; one whose first line is `-- expect: no rows` must return
nothing (the audit). The psql variables the recipes use are set to real
values: saga_id, trace_id, message_id, idempotency_key.
"""

import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import SRC, Checks, System, need_tool, request, tmpdir

DOC = os.path.join(SRC, "docs", "operations.md")
checks = Checks("operations")

PASSWORDS = {"ORCHESTRATOR_DB_PASSWORD": "pw-o", "PAYMENT_DB_PASSWORD": "pw-p",
             "INVENTORY_DB_PASSWORD": "pw-i", "AUDITOR_DB_PASSWORD": "pw-a"}


def blocks(lang):
    text = open(DOC, encoding="utf-8").read()
    return [m.group(1) for m in re.finditer(r"^```%s\n(.*?)^```" % lang, text, re.M | re.S)]


def initdb_bootstrap(sy):
    """Bootstraps the way the postgres image would: docker/initdb.sh with
    the passwords in the environment (here over TCP instead of the image's
    socket). Twice: a re-run must be harmless."""
    env = dict(os.environ, POSTGRES_USER="postgres", POSTGRES_DB=sy.db, PGHOST="127.0.0.1",
               PGPORT=str(sy.pg_port),
               PGSAGA_BOOTSTRAP=os.path.join(SRC, "sql", "bootstrap.sql"), **PASSWORDS)
    for n in (1, 2):
        r = subprocess.run(["bash", os.path.join(SRC, "docker", "initdb.sh")], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not checks.ok(r.returncode == 0, "docker/initdb.sh run %d: exit %d: %s"
                         % (n, r.returncode, r.stderr)):
            sys.exit(1)
    # a missing password stops it instead of creating a role without one
    env.pop("AUDITOR_DB_PASSWORD")
    r = subprocess.run(["bash", os.path.join(SRC, "docker", "initdb.sh")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checks.ok(r.returncode != 0 and "AUDITOR_DB_PASSWORD" in r.stderr,
              "docker/initdb.sh without AUDITOR_DB_PASSWORD must fail naming it: %d %s"
              % (r.returncode, r.stderr))
    n = sy.scalar("SELECT count(*) FROM pg_authid WHERE rolname IN ('saga_orchestrator', "
                  "'saga_payment', 'saga_inventory', 'saga_auditor') AND rolpassword IS NOT NULL")
    checks.ok(n == "4", "initdb.sh gave the four roles passwords (%s)" % n)


def run_block(sy, sql, variables):
    first = sql.lstrip().split("\n", 1)[0]
    role = None if first.startswith("-- as: superuser") else "saga_auditor"
    path = os.path.join(sy.root, "recipe.sql")
    with open(path, "w", encoding="utf-8") as f:
        f.write(sql)
    cmd = sy.psql_cmd(role) + ["-At", "-F", "\t"]
    for k, v in variables.items():
        cmd += ["-v", "%s=%s" % (k, v)]
    r = subprocess.run(cmd + ["-f", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    return role or "superuser", r


def main():
    need_tool("promtool", "prometheus")
    if not checks.ok(blocks("sql"), "operations.md has ```sql blocks"):
        checks.done()
    for n, rules in enumerate(blocks("yaml")):
        d = tmpdir("rules-")
        path = os.path.join(d, "rules.yml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(rules)
        r = subprocess.run(["promtool", "check", "rules", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        checks.ok(r.returncode == 0, "yaml block %d: promtool check rules: %s" % (n, r.stdout))

    env = {"payment": {"PAYMENT_DEFAULT_CREDIT": "5000"},
           # the stuck saga's command keeps being retried, never dead
           "orchestrator": {"RETRY_BASE_MS": "50", "RETRY_CAP_MS": "200",
                            "RETRY_MAX_ATTEMPTS": "100000"}}
    with System("operations", env=env, bootstrap=initdb_bootstrap) as sy:
        sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 100), ('B002', 0)")
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        r = sy.order("ops-completed", amount=100,
                     headers={"traceparent": "00-%s-00f067aa0ba902b7-01" % trace})
        checks.ok(r.status == 201, "order accepted: %r" % r)
        saga = r.json()["sagaId"]
        for n in range(2):
            sy.order("ops-completed-%d" % n, customer="c-%d" % n, amount=100)
        sy.order("ops-failed", customer="c-poor", amount=6000)
        sy.order("ops-compensated", item="B002", amount=100)
        checks.ok(sy.wait_terminal(30), "the sagas finished")

        # a dead letter: an event for a saga that does not exist (404)
        dead = sy.scalar(
            "INSERT INTO payment.outbox_messages (message_id, kind, destination, type, payload) "
            "SELECT id, 'event', 'orchestrator', 'PaymentSucceeded', "
            "       jsonb_build_object('eventId', id, 'sagaId', gen_random_uuid()) "
            "FROM gen_random_uuid() AS id RETURNING message_id")
        checks.ok(sy.wait_sql("SELECT count(*) FROM payment.dead_letters", "1", 20),
                  "the undeliverable event became a dead letter")

        # a stuck saga: inventory refuses every command (500) for now, and
        # the saga is made to look as if it had waited ten minutes
        r = request(sy.ports["inventory"], "POST", "/admin/faults", {"failRate": 1},
                    sy.internal())
        checks.ok(r.status == 200, "inventory faults on: %r" % r)
        stuck = sy.order("ops-stuck", customer="c-stuck", amount=100).json()["sagaId"]
        checks.ok(sy.wait_sql("SELECT attempt_count > 0 FROM orchestrator.outbox_messages "
                              "WHERE payload->>'sagaId' = '%s' AND type = "
                              "'ReserveInventoryCommand'" % stuck, "t", 20),
                  "the stuck saga's reservation is being retried")
        sy.psql("UPDATE orchestrator.saga_instances SET updated_at = now() - interval "
                "'10 minutes' WHERE saga_id = '%s'" % stuck)

        variables = {"saga_id": saga, "trace_id": trace, "message_id": dead,
                     "idempotency_key": "ops-completed"}
        for n, sql in enumerate(blocks("sql"), 1):
            title = sql.strip().splitlines()[0][:70]
            role, r = run_block(sy, sql, variables)
            if not checks.ok(r.returncode == 0, "sql block %d (%s) as %s: %s"
                             % (n, title, role, r.stderr.strip())):
                continue
            rows = r.stdout.splitlines()
            if sql.lstrip().startswith("-- expect: no rows"):
                checks.ok(not rows, "sql block %d (%s) must return no rows, got %r"
                          % (n, title, rows))
            if "WHERE trace_id = :'trace_id'" in sql:
                checks.ok(rows and rows[0].startswith(saga), "trace id finds the saga: %r" % rows)
            if "saga_history" in sql and ":'saga_id'" in sql:
                checks.ok(len(rows) == 3, "the completed saga's timeline has 3 rows: %r" % rows)
            if "retry_dead_letter(:'message_id')" in sql:
                checks.ok(sorted(x.split("\t")[1] for x in rows) == ["f", "f", "t"],
                          "exactly one schema retried the dead letter: %r" % rows)
            if "AS stuck," in sql:
                checks.ok(any(x.startswith("PendingInventory\t1\t") for x in rows),
                          "the stuck saga is found: %r" % rows)
            print("ok %d as %s: %s (%d rows)" % (n, role, title, len(rows)), flush=True)
        # the auditor really is read-only: the writing recipes fail for it
        r = subprocess.run(sy.psql_cmd("saga_auditor") + ["-c",
                           "SELECT payment.retry_dead_letters()"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        checks.ok(r.returncode != 0, "saga_auditor may not retry dead letters")
    checks.done()


if __name__ == "__main__":
    main()
