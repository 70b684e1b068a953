#!/usr/bin/python3
"""docs/sagas.md ("Your own saga") works as written.

The orchestrator, payment, inventory and shipping (saga-participant on
sql/shipping/shipping.sql) run on a private PostgreSQL on free ports, as
scripts/up runs them (the demo stock loaded). The page's ```sh blocks are
run in order, as written, in one bash (so the variables one block sets are
there for the next) in a scratch directory, with the page's ports (8080,
8083) replaced by the test's and its two `export ...TOKEN=` lines given the
test's tokens. Each block's output is checked against what the page says
it shows; a block that reads a saga the page says is finished "a moment
later" is run again until it shows it (or 60 s pass).
"""

import json
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import SRC, Checks, request, tmpdir
from sagatest.shipping import ShippingSystem

checks = Checks("own-saga")
DOC = os.path.join(SRC, "docs", "sagas.md")
PAGE_PORTS = {"orchestrator": 8080, "shipping": 8083}
MARK = "__own_saga_block_done__"


def page_blocks():
    text = open(DOC, encoding="utf-8").read()
    return re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)


class Shell:
    """One bash, fed a block at a time; its output up to a marker line."""

    def __init__(self, cwd):
        self.p = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)

    def run(self, block):
        self.p.stdin.write(block + "\necho; echo %s $?\n" % MARK)
        self.p.stdin.flush()
        out = []
        for line in self.p.stdout:
            if line.startswith(MARK):
                return int(line.split()[1]), "".join(out).rstrip("\n")
            out.append(line)
        return -1, "".join(out)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def json_lines(out):
    """The JSON values of the output, one per line (a value not alone on
    its line, or a line that is not JSON, is returned as a string)."""
    got = []
    for line in out.splitlines():
        try:
            got.append(json.loads(line))
        except ValueError:
            got.append(line)
    return got


def expectations():
    """(a substring that names the block, check(output) -> bool, run again until it holds)."""
    def completed(out):
        v = json_lines(out)
        return (len(v) == 1 and v[0].get("state") == "Completed"
                and v[0].get("definition") == {"name": "reserve-and-ship", "version": 1}
                and v[0].get("outputs", {}).get("Ship", {}).get("trackingId", "")
                .startswith("TRK-"))

    def compensated(out):
        return out.splitlines() == [
            "Compensated",
            "null -> PendingReserve (SagaStarted)",
            "PendingReserve -> PendingShip (InventoryReserved)",
            "PendingShip -> Compensating (ShippingFailed)",
            "Compensating -> Compensated (InventoryReleased)"]

    def versions(out):
        v = json_lines(out)
        want = [{"failRate": 0, "delayMs": 20000, "dropResponseRate": 0},
                {"name": "reserve-and-ship", "version": 2}]
        return (len(v) == 6 and v[:2] == want
                and v[2].get("definition") == {"name": "reserve-and-ship", "version": 1}
                and v[2].get("state") in ("PendingReserve", "PendingShip")
                and v[3].get("definition") == {"name": "reserve-and-ship", "version": 2}
                and v[4] == {"migrated": 1, "refused": []}
                and v[5].get("delayMs") == 0)

    def moved(out):
        v = json_lines(out)
        return (len(v) == 1 and v[0].get("state") == "Completed"
                and v[0].get("definition") == {"name": "reserve-and-ship", "version": 2}
                and sorted(v[0].get("causes", [])) == sorted(
                    ["SagaStarted", "InventoryReserved", "Migrated", "OrderShipped"])
                and v[0]["causes"][0] == "SagaStarted" and v[0]["causes"][-1] == "OrderShipped")

    return [
        ("export ADMIN_TOKEN", lambda out: out == "", False),
        ("cat > reserve-and-ship.json", lambda out: out == "", False),
        ("--data-binary @reserve-and-ship.json\n",
         lambda out: json_lines(out) == [{"name": "reserve-and-ship", "version": 1}], False),
        ("Idempotency-Key: ras-1",
         lambda out: re.fullmatch(r"[0-9a-f-]{36}", out) is not None, False),
        ("{state, definition, outputs}", completed, True),
        ("Idempotency-Key: ras-2", compensated, True),
        ("/migrate", versions, False),
        ("causes:", moved, True),
    ]


def main():
    blocks = page_blocks()
    want = expectations()
    checks.ok(len(blocks) == len(want), "the page has %d sh blocks, the test knows %d"
              % (len(blocks), len(want)))
    work = tmpdir("own-saga-")
    with ShippingSystem("own-saga") as sy:
        shell = Shell(work)
        try:
            for block, (name, check, again) in zip(blocks, want):
                if not checks.ok(name in block, "block %r is not the one that has %r"
                                 % (block[:60], name)):
                    break
                for page_service, port in PAGE_PORTS.items():
                    block = block.replace("127.0.0.1:%d" % port,
                                          "127.0.0.1:%d" % sy.ports[page_service])
                block = re.sub(r"^export ADMIN_TOKEN=.*$",
                               "export ADMIN_TOKEN='%s'" % sy.admin_token, block, flags=re.M)
                block = re.sub(r"^export INTERNAL_TOKEN=.*$",
                               "export INTERNAL_TOKEN='%s'" % sy.token, block, flags=re.M)
                end = time.monotonic() + 60
                while True:
                    rc, out = shell.run(block)
                    ok = rc == 0 and check(out)
                    if ok or not again or time.monotonic() > end:
                        break
                    time.sleep(0.5)
                print("--- block %r: exit %d\n%s" % (name, rc, out), flush=True)
                checks.ok(ok, "block %r: exit %d, output:\n%s" % (name, rc, out))
        finally:
            shell.close()
        # what the page left: its sagas, their definitions, once the last
        # one the page started has finished
        want = [["1", "Completed"], ["1", "Compensated"], ["2", "Completed"], ["2", "Completed"]]
        end = time.monotonic() + 60
        while True:
            rows = sy.psql("SELECT definition_version, state FROM orchestrator.saga_instances"
                           " WHERE definition_name = 'reserve-and-ship' ORDER BY created_at")
            if rows == want or time.monotonic() > end:
                break
            time.sleep(0.25)
        checks.ok(rows == want, "the page's sagas: %s" % rows)
        r = request(sy.ports["orchestrator"], "GET", "/admin/api/definitions", None, sy.admin())
        defs = {d["name"]: d for d in r.json().get("definitions", [])} if r.status == 200 else {}
        checks.ok(defs.get("reserve-and-ship", {}).get("versions") == [1, 2],
                  "the definitions listed: %r" % r)
    checks.done()


if __name__ == "__main__":
    main()
