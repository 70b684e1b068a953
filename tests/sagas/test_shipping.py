#!/usr/bin/python3
"""The shipped three-step saga, order-with-shipping (payment, inventory,
then shipping: src/orchestrator/definitions/order-with-shipping.json), on
the real services and the real shipping participant (saga-participant
running sql/shipping/shipping.sql), over HTTP or, with --transport amqp,
through a private RabbitMQ node.

Each saga is started with POST /sagas/{name} and read with GET /sagas/{id};
its effects are read from each participant's own tables:

- success: Completed, the trackingId in outputs.Shipping, and the shipment
  row shipped with that trackingId; the admin API's saga carries
  shipping's step and messages beside payment's and inventory's; the same
  start again is a replay;
- payment declined (more than the customer's credit): Failed, nothing
  reserved or shipped;
- out of stock: Compensated, the payment refunded, nothing shipped;
- an undeliverable address: Compensated, the inventory released and then
  the payment refunded, in that order in the history;
- a deadline at the last step: shipping answers late (fault injection,
  delayMs, longer than the Shipping step's own deadlineMs of a variant
  registered through the admin API): StepTimeout, then the shipment
  cancelled (or voided), the inventory released, the payment refunded;
- an operator's cancel while the saga waits at shipping: cause Cancelled,
  then the same undo;
- (http) a definition whose participant, nowhere, has no NOWHERE_URL: its
  command is a dead letter in orchestrator.outbox_messages whose last_error
  names NOWHERE_URL;
- shipping SIGKILLed while it holds the commands of sagas waiting at it,
  and started again: each completes, shipped once, answered once;
- saga-bench --saga order-with-shipping (what scripts/bench --compare sagas
  runs): each of its starts answered 201, each saga found by the customer
  of its input and Completed.

At the end: every saga is terminal, scripts/audit (sql/audit.sql) is clean,
each Completed saga of order-with-shipping has its payment captured, its
reservation reserved and its shipment shipped, each Compensated or Failed
one has none of them standing, and no outbox holds a dead letter but the
nowhere saga's.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import BUILD, SRC, Checks, request, tmpdir
from sagatest.shipping import DEFINITIONS, ShippingSystem

TERMINAL = ("Completed", "Failed", "Compensated")
AUDIT = os.path.join(SRC, "scripts", "audit")
SHIP_DELAY_MS = 4000     # shipping's answers, while late
QUICK_DEADLINE_MS = 1000  # the quick variant's Shipping deadline: well under the delay

checks = None


def definition(name):
    with open(os.path.join(DEFINITIONS, name + ".json"), encoding="utf-8") as f:
        return json.load(f)


def quick_variant():
    """order-with-shipping under another name, its Shipping step with a
    deadline of its own."""
    d = definition("order-with-shipping")
    d["name"] = "order-with-shipping-quick"
    for s in d["steps"]:
        if s["name"] == "Shipping":
            s["deadlineMs"] = QUICK_DEADLINE_MS
    return d


# A participant no variable names: its commands have nowhere to go.
NOWHERE = {
    "name": "lost-parcel", "version": 1,
    "input": {"itemId": {"type": "id"}},
    "steps": [{"name": "Parcel", "participant": "nowhere",
               "command": "SendParcelCommand", "fields": ["itemId"],
               "succeeded": "ParcelSent", "failed": "ParcelLost",
               "compensation": "RecallParcelCommand", "compensated": "ParcelRecalled",
               "deadlineMs": 600000}],
}


def body(address="1 Main St", customer="c-1", item="A001", qty=1, amount=1200):
    return {"customerId": customer, "itemId": item, "qty": qty, "amount": amount,
            "address": address}


class Run:
    def __init__(self, sy):
        self.sy = sy
        self.sagas = {}  # what -> saga id

    def start(self, what, name, payload):
        key = "%s-%s" % (what, uuid.uuid4())
        r = self.sy.start_saga(name, key, payload)
        ok = checks.ok(r.status == 201, "%s: POST /sagas/%s answered %r" % (what, name, r))
        if not ok:
            return None
        b = r.json()
        checks.ok(b.get("definition", {}).get("name") == name and b.get("duplicated") is False
                  and r.header("Location") == "/sagas/" + b["sagaId"],
                  "%s: the start's answer %s" % (what, b))
        self.sagas[what] = (b["sagaId"], key, name, payload)
        return b["sagaId"]

    def wait(self, saga, states, timeout=90):
        end = time.monotonic() + timeout
        got = None
        while time.monotonic() < end:
            got = self.sy.saga(saga)
            if got and got["state"] in states:
                return got
            time.sleep(0.1)
        return got

    def finished(self, what, state):
        """Waits for the saga `what` to be terminal; checks it is `state`;
        returns GET /sagas/{id}'s body."""
        saga = self.sagas.get(what, (None,))[0]
        if not saga:
            return None
        got = self.wait(saga, TERMINAL)
        checks.ok(got and got["state"] == state,
                  "%s: ended %s, not %s: %s" % (what, got and got["state"], state, got))
        return got

    def row(self, sql, saga):
        return self.sy.scalar(sql.replace("$1", "'%s'" % saga))


def transitions(got):
    """The history as (from, to, cause), oldest first."""
    return [(h["fromState"], h["toState"], h["cause"])
            for h in sorted((got or {}).get("history", []), key=lambda h: h["version"])]


START = [(None, "PendingPayment", "SagaStarted"),
         ("PendingPayment", "PendingInventory", "PaymentSucceeded"),
         ("PendingInventory", "PendingShipping", "InventoryReserved")]
UNDO_ALL = [("Compensating", "Compensating", "ShipmentCancelled"),
            ("Compensating", "Compensating", "InventoryReleased"),
            ("Compensating", "Compensated", "PaymentRefunded")]


def effects(run, saga):
    """(payment status, reservation status, shipment status), '' for none."""
    return (run.row("SELECT coalesce((SELECT status FROM payment.payments WHERE saga_id = $1), '')",
                    saga),
            run.row("SELECT coalesce((SELECT status FROM inventory.reservations "
                    "WHERE saga_id = $1), '')", saga),
            run.row("SELECT coalesce((SELECT status FROM shipping.shipments WHERE saga_id = $1),"
                    " '')", saga))


def flows(run, transport):
    sy = run.sy
    if transport == "amqp":
        for s in ("orchestrator", "payment", "inventory", "shipping"):
            r = request(sy.ports[s], "GET", "/readyz")
            checks.ok(r.status == 200 and r.json().get("broker") == "up",
                      "%s is not on the broker: %r" % (s, r))
    # the variant with a short Shipping deadline, registered through the admin API
    r = request(sy.ports["orchestrator"], "POST", "/admin/api/definitions", quick_variant(),
                sy.admin())
    checks.ok(r.status == 201 and r.json() == {"name": "order-with-shipping-quick",
                                               "version": 1},
              "registering the quick variant: %r" % r)

    run.start("success", "order-with-shipping", body())
    run.start("declined", "order-with-shipping", body(customer="c-poor", amount=2000000))
    run.start("out-of-stock", "order-with-shipping", body(item="B001"))
    run.start("undeliverable", "order-with-shipping", body(address="nowhere"))
    if transport == "http":
        run.start("no-url", "lost-parcel", {"itemId": "A001"})

    got = run.finished("success", "Completed")
    if got:
        saga = got["sagaId"]
        tracking = got.get("outputs", {}).get("Shipping", {}).get("trackingId", "")
        checks.ok(tracking.startswith("TRK-"), "success: outputs %s" % got.get("outputs"))
        checks.ok(transitions(got) == START + [("PendingShipping", "Completed", "OrderShipped")],
                  "success: history %s" % transitions(got))
        checks.ok(got["input"] == body(), "success: input %s" % got["input"])
        checks.ok(got["definition"] == {"name": "order-with-shipping", "version": 1},
                  "success: definition %s" % got["definition"])
        row = sy.psql("SELECT status, tracking_id, item_id, qty, address FROM shipping.shipments "
                      "WHERE saga_id = '%s'" % saga)
        checks.ok(row == [["shipped", tracking, "A001", "1", "1 Main St"]],
                  "success: the shipment %s, tracking %s" % (row, tracking))
        checks.ok(effects(run, saga) == ("captured", "reserved", "shipped"),
                  "success: effects %s" % (effects(run, saga),))
        # the admin API's saga combines shipping's part too (a participant
        # the definition names, opened at run time): its step and its messages
        r = request(sy.ports["orchestrator"], "GET", "/admin/api/sagas/" + saga, None,
                    sy.admin())
        detail = r.json() if r.status == 200 else {}
        steps = [(x.get("participant"), x.get("command"), x.get("status"),
                  (x.get("output") or {}).get("trackingId"))
                 for x in detail.get("steps") or []]
        shipping_msgs = [m for m in detail.get("messages") or [] if m.get("service") == "shipping"]
        checks.ok(steps == [("shipping", "ShipOrderCommand", "succeeded", tracking)]
                  and detail.get("unavailable") == [] and len(shipping_msgs) >= 2
                  and detail.get("payment", {}).get("status") == "captured",
                  "success: the admin API's saga lacks shipping's part: %d %s, messages %s"
                  % (r.status, steps, shipping_msgs))
        _, key, name, payload = run.sagas["success"]
        r = sy.start_saga(name, key, payload)
        checks.ok(r.status == 201 and r.json().get("duplicated") is True
                  and r.json()["sagaId"] == saga and r.header("Idempotent-Replayed") == "true",
                  "success: the same start again is not a replay: %r" % r)

    got = run.finished("declined", "Failed")
    if got:
        checks.ok(transitions(got) == [START[0], ("PendingPayment", "Failed", "PaymentFailed")],
                  "declined: history %s" % transitions(got))
        eff = effects(run, got["sagaId"])
        checks.ok(eff[0] != "captured" and eff[1:] == ("", ""), "declined: effects %s" % (eff,))

    got = run.finished("out-of-stock", "Compensated")
    if got:
        checks.ok(transitions(got) == START[:2] + [
            ("PendingInventory", "Compensating", "InventoryReservationFailed"),
            ("Compensating", "Compensated", "PaymentRefunded")],
            "out of stock: history %s" % transitions(got))
        eff = effects(run, got["sagaId"])
        checks.ok(eff[0] == "refunded" and eff[1] != "reserved" and eff[2] == "",
                  "out of stock: effects %s" % (eff,))

    got = run.finished("undeliverable", "Compensated")
    if got:
        # the inventory released before the payment refunded: the reverse order
        checks.ok(transitions(got) == START + [
            ("PendingShipping", "Compensating", "ShippingFailed"),
            ("Compensating", "Compensating", "InventoryReleased"),
            ("Compensating", "Compensated", "PaymentRefunded")],
            "undeliverable: history %s" % transitions(got))
        eff = effects(run, got["sagaId"])
        checks.ok(eff == ("refunded", "released", "refused"), "undeliverable: effects %s" % (eff,))
        checks.ok(got.get("outputs", {}).get("Shipping") is None,
                  "undeliverable: outputs %s" % got.get("outputs"))

    # shipping slowed: a deadline at the last step, and an operator's cancel there
    r = sy.faults("shipping", delayMs=SHIP_DELAY_MS)
    checks.ok(r.status == 200, "shipping's faults: %r" % r)
    late = run.start("deadline", "order-with-shipping-quick", body(address="2 Late Lane"))
    held = run.start("cancel", "order-with-shipping", body(address="3 Held Road"))
    if held:
        got = run.wait(held, ("PendingShipping",) + TERMINAL)
        checks.ok(got and got["state"] == "PendingShipping",
                  "cancel: not waiting at shipping: %s" % got)
        r = request(sy.ports["orchestrator"], "POST", "/admin/api/sagas/%s/cancel" % held,
                    {"reason": "customer called"}, sy.admin())
        checks.ok(r.status == 200, "cancel: %r" % r)
    if late:
        got = run.finished("deadline", "Compensated")
        if got:
            checks.ok(transitions(got) == START + [
                ("PendingShipping", "Compensating", "StepTimeout")] + UNDO_ALL,
                "deadline: history %s" % transitions(got))
            eff = effects(run, late)
            checks.ok(eff[0] == "refunded" and eff[1] == "released" and eff[2] in ("", "cancelled"),
                      "deadline: effects %s" % (eff,))
    got = run.finished("cancel", "Compensated")
    if got:
        checks.ok(transitions(got) == START + [
            ("PendingShipping", "Compensating", "Cancelled")] + UNDO_ALL,
            "cancel: history %s" % transitions(got))
        eff = effects(run, held)
        checks.ok(eff[0] == "refunded" and eff[1] == "released" and eff[2] in ("", "cancelled"),
                  "cancel: effects %s" % (eff,))
    checks.ok(sy.faults("shipping", delayMs=0).status == 200, "shipping's faults off")

    if transport == "http":
        saga = run.sagas.get("no-url", (None,))[0]
        if saga:
            sql = ("SELECT dead_at IS NOT NULL, last_error FROM orchestrator.outbox_messages "
                   "WHERE payload->>'sagaId' = '%s' AND type = 'SendParcelCommand'" % saga)
            end = time.monotonic() + 30
            rows = sy.psql(sql)
            while not (rows and rows[0][0] == "t") and time.monotonic() < end:
                time.sleep(0.1)
                rows = sy.psql(sql)
            checks.ok(len(rows) == 1 and rows[0][0] == "t" and "NOWHERE_URL" in rows[0][1],
                      "no-url: the command's outbox row %s" % rows)
            got = sy.saga(saga)
            checks.ok(got and got["state"] == "PendingParcel", "no-url: the saga %s" % got)


KILLED = 5  # sagas in flight at shipping when it is SIGKILLed
BENCHED = 24  # sagas saga-bench starts


def shipping_killed(run):
    """shipping SIGKILLed while it holds commands (answering late), then
    started again: each saga completes, shipped once."""
    sy = run.sy
    checks.ok(sy.faults("shipping", delayMs=SHIP_DELAY_MS).status == 200, "shipping slowed")
    sagas = [run.start("killed-%d" % i, "order-with-shipping", body(address="%d Kill St" % i))
             for i in range(KILLED)]
    sagas = [s for s in sagas if s]
    for s in sagas:
        got = run.wait(s, ("PendingShipping",) + TERMINAL)
        checks.ok(got and got["state"] == "PendingShipping", "killed: not at shipping: %s" % got)
    proc = sy.procs["shipping"]
    proc.kill()
    proc.wait()
    # started again without the delay (a run-time setting, gone with the process)
    sy.start_service("shipping")
    sy.wait_ready("shipping")
    for i, s in enumerate(sagas):
        got = run.finished("killed-%d" % i, "Completed")
        if got:
            checks.ok(effects(run, s) == ("captured", "reserved", "shipped"),
                      "killed %d: effects %s" % (i, effects(run, s)))
            rows = sy.psql("SELECT status FROM shipping.participant_steps WHERE saga_id = '%s'"
                           % s)
            checks.ok(rows == [["succeeded"]], "killed %d: shipping's steps %s" % (i, rows))
            n = sy.scalar("SELECT count(*) FROM shipping.outbox_messages "
                          "WHERE payload->>'sagaId' = '%s'" % s)
            checks.ok(n == "1", "killed %d: shipping answered %s times" % (i, n))


def benched(run):
    """saga-bench starts BENCHED sagas of order-with-shipping, closed loop,
    and finds them by their input's customer (no customer_id column)."""
    sy = run.sy
    r = subprocess.run(
        [os.path.join(BUILD, "src", "bench", "saga-bench"),
         "--url", "http://127.0.0.1:%d" % sy.ports["orchestrator"],
         "--db-url", sy.url("saga_auditor"), "--admin-url", sy.url(),
         "--saga", "order-with-shipping", "--concurrency", "4", "--count", str(BENCHED),
         "--prefix", "bench", "--wait", "90", "--quiet", "--no-wake"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    try:
        got = json.loads(r.stdout)
    except ValueError:
        got = {}
    post, outcomes = got.get("post", {}), got.get("outcomes", {})
    checks.ok(r.returncode == 0 and post.get("created_201") == BENCHED
              and got.get("sagas") == BENCHED and got.get("terminal") == BENCHED
              and outcomes.get("Completed") == BENCHED,
              "saga-bench --saga order-with-shipping (exit %d): %s" % (r.returncode, r.stdout))


def afterwards(run):
    """What holds once everything has settled."""
    sy = run.sy
    lost = run.sagas.get("no-url", (None,))[0]
    others = "saga_id <> '%s'" % lost if lost else "true"
    checks.ok(sy.wait_sql("SELECT count(*) FROM orchestrator.saga_instances WHERE state NOT IN "
                          "('Completed', 'Failed', 'Compensated') AND " + others, "0", 60),
              "every saga is terminal")
    r = subprocess.run([AUDIT, sy.url()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    checks.ok(r.returncode == 0, "scripts/audit: exit %d\n%s" % (r.returncode, r.stdout))
    # the three effects of every order-with-shipping saga, by its end
    rows = sy.psql(
        "SELECT s.saga_id, s.state, coalesce(p.status, ''), coalesce(r.status, ''),"
        "       coalesce(sh.status, '')"
        "  FROM orchestrator.saga_instances s"
        "  LEFT JOIN payment.payments p USING (saga_id)"
        "  LEFT JOIN inventory.reservations r USING (saga_id)"
        "  LEFT JOIN shipping.shipments sh USING (saga_id)"
        " WHERE s.definition_name LIKE 'order-with-shipping%'")
    checks.ok(len(rows) == 6 + KILLED + BENCHED, "%d sagas of order-with-shipping: %s"
              % (6 + KILLED + BENCHED, rows))
    for saga, state, pay, res, ship in rows:
        if state == "Completed":
            checks.ok((pay, res, ship) == ("captured", "reserved", "shipped"),
                      "Completed %s: %s %s %s" % (saga, pay, res, ship))
        else:
            checks.ok(state in ("Failed", "Compensated") and pay != "captured"
                      and res != "reserved" and ship != "shipped",
                      "%s %s stands: %s %s %s" % (state, saga, pay, res, ship))
    dead = sy.psql(
        "SELECT 'orchestrator', type, last_error FROM orchestrator.outbox_messages"
        " WHERE dead_at IS NOT NULL AND payload->>'sagaId' IS DISTINCT FROM %s"
        " UNION ALL SELECT 'payment', type, last_error FROM payment.outbox_messages"
        " WHERE dead_at IS NOT NULL"
        " UNION ALL SELECT 'inventory', type, last_error FROM inventory.outbox_messages"
        " WHERE dead_at IS NOT NULL"
        " UNION ALL SELECT 'shipping', type, last_error FROM shipping.outbox_messages"
        " WHERE dead_at IS NOT NULL" % ("'%s'" % lost if lost else "NULL"))
    checks.ok(dead == [], "dead letters: %s" % dead)
    for s, p in sy.procs.items():
        checks.ok(p.poll() is None, "saga-%s died:\n%s" % (s, sy.tail(s)))


def main():
    global checks
    ap = argparse.ArgumentParser()
    ap.add_argument("--transport", choices=("http", "amqp"), default="http")
    args = ap.parse_args()
    checks = Checks("sagas-shipping" + ("-amqp" if args.transport == "amqp" else ""))
    defs = tmpdir("sagas-defs-")
    shutil.copy(os.path.join(DEFINITIONS, "order-with-shipping.json"), defs)
    with open(os.path.join(defs, "lost-parcel.json"), "w", encoding="utf-8") as f:
        json.dump(NOWHERE, f)
    # a long default deadline: only the quick variant's may pass
    env = {"orchestrator": {"STEP_TIMEOUT_MS": "120000"}}
    with ShippingSystem("sagas-" + args.transport, args.transport, defs, env) as sy:
        run = Run(sy)
        flows(run, args.transport)
        shipping_killed(run)
        benched(run)
        afterwards(run)
    checks.done()


if __name__ == "__main__":
    main()
