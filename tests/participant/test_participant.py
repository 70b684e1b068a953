#!/usr/bin/python3
"""saga-participant, a participant whose commands are SQL functions, proves
itself with the example of sql/shipping/.

On a private PostgreSQL bootstrapped with sql/bootstrap.sql and
sql/shipping/shipping.sql, saga-participant runs as shipping. The
conformance kit, run as docs/participants.md shows it (ports replaced),
plays the orchestrator and passes every check. Then, with a receiver of our
own playing the orchestrator, over real HTTP, its commands grouped by item
([key] in PARTICIPANT_COMMANDS): a command is answered once
with its output, a copy is absorbed, a compensation after the command undoes
it once (cancel_shipment raises if called twice), a compensation before the
command voids it and the late command is declined `voided` without
ship_order being called (no shipments row), a bad field is a 400 that
commits nothing. Last, a start with a function missing or of the wrong
signature stops, naming it.
"""

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import (SRC, Checks, PgCluster, binary, free_port, request, spawn,
                           stop_process, tail, wait_ready, BUILD)

checks = Checks("participant")
DOC = os.path.join(SRC, "docs", "participants.md")
SHIPPING_SQL = os.path.join(SRC, "sql", "shipping", "shipping.sql")
# the page's ports: the participant's and the kit's
PAGE_PORTS = (8083, 8092)
FAST_RETRY = {"RETRY_BASE_MS": "50", "RETRY_CAP_MS": "500", "RETRY_MAX_ATTEMPTS": "1000",
              "BREAKER_OPEN_MS": "200"}


def page_settings_and_kit():
    """The shipping block of the page: its settings (NAME=value lines) and
    its kit command, continuation lines joined."""
    text = open(DOC, encoding="utf-8").read()
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        if "--step Shipping" not in block:
            continue
        settings = dict(re.findall(r"^export (PARTICIPANT_\w+)='([^']*)'$", block, re.M))
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.startswith("scripts/conformance "):
                return settings, re.sub(r" +", " ", cmd)
    checks.ok(False, "docs/participants.md shows no kit command for --step Shipping")
    checks.done()


class Receiver:
    """Plays the orchestrator: takes POST /events/{Type}, answers 200, keeps
    (type, body, Authorization) in order."""

    def __init__(self):
        self.events = []
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"null")
                with outer.cond:
                    outer.events.append((self.path.rsplit("/", 1)[-1], body,
                                         self.headers.get("Authorization")))
                    outer.cond.notify_all()
                out = b'{"duplicated": false}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, saga):
        with self.cond:
            return [e for e in self.events if e[1].get("sagaId") == saga]

    def wait(self, saga, n, timeout=30):
        """The saga's events once there are n of them (or what came in timeout)."""
        with self.cond:
            self.cond.wait_for(lambda: len([e for e in self.events
                                            if e[1].get("sagaId") == saga]) >= n, timeout)
        return self.of(saga)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Shipping(PgCluster):
    """The private cluster, its database bootstrapped with bootstrap.sql and
    shipping.sql, and saga-participant as shipping (start_participant)."""

    def __init__(self, settings):
        super().__init__(os.path.join(BUILD, "tests", "ops-run", "participant-%d" % os.getpid()),
                         "ops_participant")
        self.settings = settings
        self.token = "participant-test-token-%d" % os.getpid()
        self.procs = []

    def start(self):
        super().start()
        self.create_db(self.db)
        self.psql_file(SHIPPING_SQL, db=self.db)

    def env(self, port, orchestrator_port, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PG", "FAULT_", "PARTICIPANT_"))}
        env.update(FAST_RETRY)
        env.update(self.settings)
        env.update({"DATABASE_URL": self.url("saga_shipping"),
                    "LISTEN_ADDR": "127.0.0.1:%d" % port, "INTERNAL_TOKEN": self.token,
                    "ORCHESTRATOR_URL": "http://127.0.0.1:%d" % orchestrator_port,
                    "LOG_LEVEL": "info"})
        env.update(extra)
        return env

    def start_participant(self, port, orchestrator_port, name, **extra):
        log = os.path.join(self.root, name + ".log")
        proc = spawn([binary("participant")], self.env(port, orchestrator_port, **extra), log)
        self.procs.append(proc)
        wait_ready(proc, port, "saga-participant (%s)" % name, log)
        return proc, log

    def stop(self):
        for p in self.procs:
            stop_process(p)
        super().stop()


def stopped(proc, log):
    """Stops a participant: SIGTERM drains it and it exits 0, with nothing
    a sanitizer build would report."""
    stop_process(proc)
    text = open(log, encoding="utf-8", errors="replace").read()
    checks.ok(proc.returncode == 0 and "Sanitizer" not in text and "runtime error" not in text,
              "saga-participant exited %s after SIGTERM:\n%s" % (proc.returncode, tail(log)))


def kit(cmd, token, port, kit_port, log_dir):
    for old, new in zip(PAGE_PORTS, (port, kit_port)):
        checks.ok("127.0.0.1:%d" % old in cmd, "the page's kit command has no 127.0.0.1:%d" % old)
        cmd = cmd.replace("127.0.0.1:%d" % old, "127.0.0.1:%d" % new)
    r = subprocess.run(["sh", "-c", cmd], cwd=SRC, env=dict(os.environ, INTERNAL_TOKEN=token),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=150)
    print("--- the kit against saga-participant (exit %d)\n%s" % (r.returncode, r.stdout),
          flush=True)
    failed = re.findall(r"^FAIL ([\w-]+)", r.stdout, re.M)
    passed = re.findall(r"^PASS ([\w-]+)", r.stdout, re.M)
    checks.ok(r.returncode == 0 and not failed and len(passed) >= 19,
              "the kit: exit %d, %d passed, failed %s" % (r.returncode, len(passed), failed))


class Commands:
    """Sends shipping's commands to the participant on port."""

    def __init__(self, port, token):
        self.port = port
        self.headers = {"Authorization": "Bearer " + token}

    def post(self, ctype, body):
        r = request(self.port, "POST", "/commands/" + ctype, body, self.headers)
        return r.status, r.json() if r.body else None

    def ship(self, cid, saga, address="1 Main St", **more):
        body = {"commandId": cid, "sagaId": saga, "itemId": "A001", "qty": 2, "address": address}
        body.update(more)
        return self.post("ShipOrderCommand", body)

    def cancel(self, cid, saga):
        return self.post("CancelShipmentCommand", {"commandId": cid, "sagaId": saga})


def new_id():
    return str(uuid.uuid4())


def behaviour(db, cmds, rx):
    """The participant's answers and effects, one saga each."""
    def rows(sql, *args):
        return db.psql(sql % args, role="saga_shipping", db=db.db)

    def shipment(saga):
        return rows("SELECT status, coalesce(tracking_id, ''), coalesce(reason, '') "
                    "FROM shipping.shipments WHERE saga_id = '%s'", saga)

    def outbox(saga):
        return int(rows("SELECT count(*) FROM shipping.outbox_messages "
                        "WHERE payload->>'sagaId' = '%s'", saga)[0][0])

    # a command answered once, its output carried
    saga, cid = new_id(), new_id()
    checks.ok(cmds.ship(cid, saga) == (200, {"duplicated": False}), "ship: not applied")
    ev = rx.wait(saga, 1)
    checks.ok([e[0] for e in ev] == ["OrderShipped"], "ship: events %s" % ev)
    if ev:
        checks.ok(ev[0][2] == cmds.headers["Authorization"], "the event came without the token")
        tracking = ev[0][1].get("output", {}).get("trackingId", "")
        checks.ok(tracking.startswith("TRK-"), "OrderShipped's output: %s" % ev[0][1])
        checks.ok(shipment(saga) == [["shipped", tracking, ""]],
                  "the shipment: %s, tracking %s" % (shipment(saga), tracking))
    # the same command again: absorbed, no second event written
    checks.ok(cmds.ship(cid, saga) == (200, {"duplicated": True}), "ship again: not duplicated")
    checks.ok(outbox(saga) == 1, "after a copy the outbox holds %d events" % outbox(saga))

    # its compensation: cancel_shipment once; again (same id, then another): answered, not run
    comp = new_id()
    checks.ok(cmds.cancel(comp, saga) == (200, {"duplicated": False}), "cancel: not applied")
    checks.ok(cmds.cancel(comp, saga) == (200, {"duplicated": True}), "cancel again: not a copy")
    # cancel_shipment raises when called for a shipment not shipped: a 200 says it was not
    checks.ok(cmds.cancel(new_id(), saga) == (200, {"duplicated": False}),
              "a second cancel of the saga (another id) was not answered 200")
    ev = rx.wait(saga, 3)
    checks.ok([e[0] for e in ev] == ["OrderShipped", "ShipmentCancelled", "ShipmentCancelled"],
              "after the cancels: %s" % [e[0] for e in ev])
    checks.ok([r[0] for r in shipment(saga)] == ["cancelled"], "cancelled: %s" % shipment(saga))
    checks.ok(rows("SELECT status FROM shipping.participant_steps WHERE saga_id = '%s'", saga)
              == [["compensated"]], "the step is not recorded compensated")

    # a compensation before its command: voided; the late command declined, ship_order not called
    saga = new_id()
    checks.ok(cmds.cancel(new_id(), saga) == (200, {"duplicated": False}), "early cancel")
    ev = rx.wait(saga, 1)
    checks.ok([e[0] for e in ev] == ["ShipmentCancelled"], "early cancel: %s" % ev)
    checks.ok(rows("SELECT status, command_id IS NULL FROM shipping.participant_steps "
                   "WHERE saga_id = '%s'", saga) == [["voided", "t"]], "not voided")
    checks.ok(cmds.ship(new_id(), saga) == (200, {"duplicated": False}), "late ship")
    ev = rx.wait(saga, 2)
    checks.ok([(e[0], e[1].get("reason")) for e in ev]
              == [("ShipmentCancelled", None), ("ShippingFailed", "voided")],
              "the late command: %s" % ev)
    checks.ok(shipment(saga) == [], "ship_order ran on a voided saga: %s" % shipment(saga))
    checks.ok(rows("SELECT status FROM shipping.participant_steps WHERE saga_id = '%s'", saga)
              == [["voided"]], "the mark did not stay")

    # a refusal of the function's: ShippingFailed with its reason; no undo for it later
    saga = new_id()
    checks.ok(cmds.ship(new_id(), saga, address="Nowhere 1") == (200, {"duplicated": False}),
              "ship to nowhere")
    checks.ok(cmds.cancel(new_id(), saga) == (200, {"duplicated": False}),
              "cancel of a refused shipment (cancel_shipment would raise)")
    ev = rx.wait(saga, 2)
    checks.ok([(e[0], e[1].get("reason")) for e in ev]
              == [("ShippingFailed", "undeliverable_address"), ("ShipmentCancelled", None)],
              "ship to nowhere: %s" % ev)
    checks.ok([r[0] for r in shipment(saga)] == ["refused"], "refused: %s" % shipment(saga))

    # a bad field: 400 naming it, nothing committed, then applied as new
    saga, cid = new_id(), new_id()
    status, body = cmds.ship(cid, saga, qty=0)
    checks.ok(status == 400 and body["error"]["code"] == "invalid_field"
              and "qty" in body["error"]["message"], "qty 0: %s %s" % (status, body))
    checks.ok(rows("SELECT count(*) FROM shipping.processed_messages WHERE message_id = '%s'",
                   cid) == [["0"]], "a refused command left its inbox row")
    checks.ok(cmds.ship(cid, saga) == (200, {"duplicated": False}), "refused, then well-formed")
    # participant_id: 1 to 64 of [A-Za-z0-9_-]
    for item, want in (("I" * 64, 200), ("I" * 65, 400), ("", 400), ("A 1", 400),
                       ("a_B-9", 200), (7, 400)):
        status, body = cmds.ship(new_id(), new_id(), itemId=item)
        checks.ok(status == want and (want == 200 or "itemId" in body["error"]["message"]),
                  "itemId %r: %s %s, not %d" % (item, status, body, want))


def dispatch(db):
    """The static calls saga-participant had participant_compile write at
    start, and the EXECUTE behind them for a name it was not given."""
    def last(sql):
        rows = db.psql(sql, role="saga_shipping", db=db.db)
        return rows[-1][0] if rows else None

    for fn, fname in (("participant_call", "ship_order"), ("participant_undo", "cancel_shipment")):
        checks.ok(last("SELECT position('shipping.%s(p_body)' IN prosrc) > 0 FROM pg_proc"
                       " WHERE oid = 'shipping.%s(text, jsonb)'::regprocedure" % (fname, fn))
                  == "t", "%s has no static call of %s" % (fn, fname))
    checks.ok(last("SELECT shipping.participant_compile('{ship_order}', '{cancel_shipment}')")
              == "f", "the same functions compiled again rewrote participant_call")
    saga = new_id()
    out = last("BEGIN; SELECT shipping.participant_compile('{another}', '{another_undo}');"
               " SELECT (shipping.participant_call('ship_order', jsonb_build_object("
               "'sagaId', '%s', 'itemId', 'A1', 'qty', 1, 'address', '1 Main St'))).output"
               " ->> 'trackingId'; ROLLBACK" % saga)
    checks.ok(out is not None and out.startswith("TRK-"),
              "ship_order through the EXECUTE (another instance's names): %r" % out)


def refusals(db):
    """Starts that must stop, naming the function."""
    right = db.settings["PARTICIPANT_COMMANDS"]
    db.psql("CREATE FUNCTION shipping.ship_text(body text) RETURNS text LANGUAGE sql "
            "RETURN body", role="saga_shipping", db=db.db)
    cases = [
        ("a missing command function", right.replace("=ship_order(", "=ship_orders("),
         "shipping.ship_orders is missing"),
        ("a missing undo function", right.replace("=cancel_shipment(", "=cancel_shipments("),
         "shipping.cancel_shipments is missing"),
        ("a command function of another signature", right.replace("=ship_order(", "=ship_text("),
         "shipping.ship_text has the wrong signature: ship_text(body text) RETURNS text"),
        ("an undo function of a command's signature",
         right.replace("=cancel_shipment(", "=ship_order("),
         "shipping.ship_order has the wrong signature"),
        ("a command function of an undo's signature",
         right.replace("=ship_order(", "=cancel_shipment("),
         "shipping.cancel_shipment has the wrong signature"),
    ]
    for what, commands, said in cases:
        env = db.env(free_port(), free_port(), PARTICIPANT_COMMANDS=commands)
        r = subprocess.run([binary("participant")], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        checks.ok(r.returncode == 2 and said in r.stdout,
                  "%s: exit %d, not 2 naming it (%r):\n%s" % (what, r.returncode, said, r.stdout))
    bad = db.env(free_port(), free_port(), PARTICIPANT_COMMANDS="ShipOrderCommand=ship_order")
    r = subprocess.run([binary("participant")], env=bad, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    checks.ok(r.returncode == 2 and "PARTICIPANT_COMMANDS: at " in r.stdout,
              "a malformed PARTICIPANT_COMMANDS: exit %d: %s" % (r.returncode, r.stdout))


def main():
    settings, kit_cmd = page_settings_and_kit()
    checks.ok(sorted(settings) == ["PARTICIPANT_COMMANDS", "PARTICIPANT_NAME"],
              "the page's shipping block sets %s" % sorted(settings))
    rx = Receiver()
    try:
        with Shipping(settings) as db:
            port, kit_port = free_port(), free_port()
            proc, log = db.start_participant(port, kit_port, "shipping-kit")
            kit(kit_cmd, db.token, port, kit_port, db.root)
            checks.ok(proc.poll() is None, "saga-participant died under the kit:\n%s" % tail(log))
            # one outbox, one dispatcher: the next one's events go to our receiver
            stopped(proc, log)

            # the same steps, its commands grouped by item ([key]): the
            # behaviour below is the same
            port = free_port()
            keyed = settings["PARTICIPANT_COMMANDS"].replace("ShipOrderCommand=",
                                                             "ShipOrderCommand[itemId]=")
            checks.ok(keyed != settings["PARTICIPANT_COMMANDS"], "no ShipOrderCommand to key")
            proc, log = db.start_participant(port, rx.port, "shipping",
                                             PARTICIPANT_COMMANDS=keyed)
            behaviour(db, Commands(port, db.token), rx)
            checks.ok(proc.poll() is None, "saga-participant died:\n%s" % tail(log))
            stopped(proc, log)
            dispatch(db)
            refusals(db)
    finally:
        rx.close()
    checks.done()


if __name__ == "__main__":
    main()
