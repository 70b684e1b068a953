#!/usr/bin/python3
"""The conformance kit (scripts/conformance) proves itself.

Against saga-payment and saga-inventory as built, on a private PostgreSQL,
it runs the kit commands docs/participants.md shows ("Check it with the
kit"), read from the page and run as written through sh, with free ports in
place of the page's 8081, 8082, 8090 and 8091: every check passes. Against
tests/conformance/broken_participant.py it runs the page's Payment command
the same way: without a flag every check passes; with --no-inbox exactly
the checks that need an inbox fail, with --no-voiding exactly the voiding
check. The five runs go side by side.
"""

import os
import re
import socket
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import SRC, Checks, PgCluster, System, free_port, spawn, stop_process, tail

checks = Checks("conformance")
DOC = os.path.join(SRC, "docs", "participants.md")
BROKEN = os.path.join(SRC, "tests", "conformance", "broken_participant.py")
DEFINITION = os.path.join(SRC, "src", "orchestrator", "definitions", "order.json")
# what the page tells a participant to run with, for the redelivery check
FAST_RETRY = {"RETRY_BASE_MS": "50", "RETRY_CAP_MS": "500", "RETRY_MAX_ATTEMPTS": "1000",
              "BREAKER_OPEN_MS": "200"}
# the page's ports: the participant's and the kit's
PAGE_PORTS = {"payment": (8081, 8090), "inventory": (8082, 8091)}
# what each broken participant must fail
BROKEN_FAILS = {
    "": set(),
    "--no-inbox": {"duplicate-sequential", "duplicate-concurrent",
                   "compensation-after-command", "answer-dropped"},
    "--no-voiding": {"compensation-before-command"},
}


def page_commands():
    """The kit commands of the page's sh blocks, continuation lines joined:
    {step: command}."""
    text = open(DOC, encoding="utf-8").read()
    out = {}
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.startswith("scripts/conformance "):
                m = re.search(r"--step (\w+)", cmd)
                out[m.group(1).lower()] = re.sub(r" +", " ", cmd)
    return out


def with_ports(cmd, page, url_port, listen_port):
    """cmd with the page's ports (page: its participant and kit ports)
    replaced by these."""
    for old, new in zip(page, (url_port, listen_port)):
        if "127.0.0.1:%d" % old not in cmd:
            checks.ok(False, "the page's command has no 127.0.0.1:%d: %s" % (old, cmd))
        cmd = cmd.replace("127.0.0.1:%d" % old, "127.0.0.1:%d" % new)
    return cmd


class Participants(System):
    """A private cluster, one database bootstrapped with sql/bootstrap.sql,
    saga-payment and saga-inventory with their events going to a kit each
    (kit_ports), and stock for inventory. No orchestrator: the kit is it."""

    def __init__(self, kit_ports):
        env = {s: dict(FAST_RETRY, ORCHESTRATOR_URL="http://127.0.0.1:%d" % kit_ports[s])
               for s in kit_ports}
        super().__init__("conformance", env=env)

    def start(self):
        PgCluster.start(self)
        self.create_db(self.db)
        for s in ("payment", "inventory"):
            self.start_service(s)
        for s in ("payment", "inventory"):
            self.wait_ready(s)
        self.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000)",
                  db=self.db)


def run_kit(cmd, token, log_dir, name):
    """Starts the kit command cmd through sh in the source tree."""
    env = dict(os.environ, INTERNAL_TOKEN=token)
    out = open(os.path.join(log_dir, "kit-%s.out" % name), "wb+")
    proc = subprocess.Popen(["sh", "-c", cmd], cwd=SRC, env=env, stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT)
    return proc, out


def kit_result(proc, out, what):
    """(exit status, {check: 'PASS' or 'FAIL'}, output) of a finished kit."""
    try:
        rc = proc.wait(timeout=100)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        checks.ok(False, "the kit against %s did not finish in 100 s" % what)
    out.seek(0)
    text = out.read().decode("utf-8", "replace")
    out.close()
    results = {m.group(2): m.group(1) for m in re.finditer(r"^(PASS|FAIL) ([\w-]+)", text, re.M)}
    print("--- the kit against %s (exit %d)\n%s" % (what, rc, text), flush=True)
    return rc, results, text


def list_checks(cmd):
    r = subprocess.run(["sh", "-c", cmd + " --list"], cwd=SRC, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=dict(os.environ, INTERNAL_TOKEN="x"))
    checks.ok(r.returncode == 0, "--list exited %d: %s" % (r.returncode, r.stderr))
    return r.stdout.split()


def wait_port(port, proc, log, timeout=10):
    """Until the broken participant listens on port."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    checks.ok(False, "broken_participant on port %d did not start:\n%s" % (port, tail(log)))



def main():
    # the page's other kit commands (shipping) are tests/participant's
    commands = {s: c for s, c in page_commands().items() if s in PAGE_PORTS}
    if not checks.ok(sorted(commands) == ["inventory", "payment"],
                     "docs/participants.md shows kit commands for %s, not payment and inventory"
                     % sorted(commands)):
        checks.done()
    kit_ports = {s: free_port() for s in PAGE_PORTS}
    with Participants(kit_ports) as system:
        runs = {}
        for s in PAGE_PORTS:
            cmd = with_ports(commands[s], PAGE_PORTS[s], system.ports[s], kit_ports[s])
            runs["saga-" + s] = (cmd,) + run_kit(cmd, system.token, system.root, s)
        broken = {}
        for flag in BROKEN_FAILS:
            port, kit_port = free_port(), free_port()
            env = dict(os.environ, INTERNAL_TOKEN=system.token,
                       ORCHESTRATOR_URL="http://127.0.0.1:%d" % kit_port)
            log = os.path.join(system.root, "broken%s.log" % flag)
            argv = [sys.executable, BROKEN, "--listen", "127.0.0.1:%d" % port,
                    "--definition", DEFINITION, "--step", "Payment"] + ([flag] if flag else [])
            broken[flag] = (spawn(argv, env, log), log, port, kit_port)
        for flag, (proc, log, port, kit_port) in broken.items():
            wait_port(port, proc, log)
            cmd = with_ports(commands["payment"], PAGE_PORTS["payment"], port, kit_port)
            runs["broken_participant " + (flag or "(no flag)")] = (cmd,) + run_kit(
                cmd, system.token, system.root, "broken" + flag)

        listed = {s: list_checks(commands[s]) for s in PAGE_PORTS}
        checks.ok(len(listed["payment"]) >= 15, "--list names %d checks" % len(listed["payment"]))
        for what, (cmd, proc, out) in runs.items():
            rc, results, text = kit_result(proc, out, what)
            want_fail = BROKEN_FAILS.get(what.split(" ", 1)[1].replace("(no flag)", ""), set()) \
                if what.startswith("broken") else set()
            want = listed["inventory" if what == "saga-inventory" else "payment"]
            checks.ok(sorted(results) == sorted(want),
                      "the kit against %s reported %s, not every check of --list %s"
                      % (what, sorted(results), sorted(want)))
            failed = {n for n, r in results.items() if r == "FAIL"}
            checks.ok(failed == want_fail, "against %s these checks failed: %s; want %s"
                      % (what, sorted(failed) or "none", sorted(want_fail) or "none"))
            checks.ok(rc == (1 if want_fail else 0),
                      "the kit against %s exited %d, want %d" % (what, rc, 1 if want_fail else 0))
        for flag, (proc, log, port, kit_port) in broken.items():
            stop_process(proc, timeout=5)
        for s in ("payment", "inventory"):
            checks.ok(system.procs[s].poll() is None,
                      "saga-%s died during the run:\n%s" % (s, system.tail(s)))
    checks.done()


if __name__ == "__main__":
    main()
