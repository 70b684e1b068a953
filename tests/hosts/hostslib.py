"""What the tests of the hosts suite share: running commands on the hosts
(scripts/hosts), moving this process into a host's network namespace, a
client that posts orders without pause and records every answer, waiting,
and the services' metrics.

Standard library only; builds on tests/ops/opslib.py (System, request).
"""

import ctypes
import os
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from opslib import SRC, die, request  # noqa: E402

HOSTS = os.path.join(SRC, "scripts", "hosts")
CLONE_NEWNET = 0x40000000


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run(*args, check=True, env=None, timeout=None):
    """Runs a command; its output as text. Raises when it fails and check."""
    r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                    r.stdout, r.stderr))
    return r


def setns(path):
    """Moves this process (one thread by then) into the network namespace
    at path."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            die("setns: %s" % os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)


def wait(cond, timeout, step=0.1):
    """cond's first true value within timeout seconds, else None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


class Client:
    """Posts orders from a few threads until stopped. Records every 201
    (sagaId -> monotonic time of the answer), the (begun, answered) times of
    each, and the monotonic times and statuses of the other answers
    (errors; status 0 when none came)."""

    def __init__(self, sy, threads=3):
        self.sy = sy
        self.accepted = {}
        self.spans = []
        self.error_times = []
        self.statuses = {}  # status of the answers other than 201 (0: none)
        self.mu = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.loop, args=(k,)) for k in range(threads)]

    @property
    def errors(self):
        with self.mu:
            return len(self.error_times)

    def loop(self, k):
        n = 0
        while not self.stopping.is_set():
            n += 1
            begun = time.monotonic()
            try:
                r = self.sy.order(str(uuid.uuid4()), customer="c-%d-%d" % (k, n % 20),
                                  amount=100 + n % 50)
            except OSError:
                r = None
            now = time.monotonic()
            with self.mu:
                if r is not None and r.status == 201:
                    self.accepted[r.json()["sagaId"]] = now
                    self.spans.append((begun, now))
                else:
                    self.error_times.append(now)
                    code = r.status if r is not None else 0
                    self.statuses[code] = self.statuses.get(code, 0) + 1
            time.sleep(0.05)

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()

    def count(self):
        with self.mu:
            return len(self.accepted)

    def longest_gap(self, t0, t1):
        """The longest stretch of [t0, t1] without a 201 answered, as
        (seconds, monotonic time of the 201 that ended it)."""
        with self.mu:
            ends = sorted(e for _, e in self.spans if t0 <= e <= t1)
        marks = [t0] + ends + [t1]
        return max((b - a, b) for a, b in zip(marks, marks[1:]))

    def errors_between(self, t0, t1):
        with self.mu:
            return sum(1 for t in self.error_times if t0 <= t <= t1)


def wait_progress(client, more, timeout):
    """True when `more` orders more than now got their 201 within timeout."""
    want = client.count() + more
    return wait(lambda: client.count() >= want, timeout) is not None


def metric_sum(sy, name):
    """The sum of a metric's series over the three services."""
    total = 0.0
    for s in sy.ports:
        r = request(sy.ports[s], "GET", "/metrics")
        for line in r.body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


TERMINAL = ("Completed", "Failed", "Compensated")
AUDIT = os.path.join(SRC, "scripts", "audit")


def verify_history(sy, client, pids, checks):
    """What every test of the suite checks afterwards: each saga answered
    201 exists and is terminal, the audit is clean, no dead letter in the
    outboxes, no service restarted. Returns (sagas, completed)."""
    ids = list(client.accepted)
    path = os.path.join(sy.root, "accepted.sql")
    with open(path, "w") as f:
        f.write("\\pset format unaligned\n\\pset tuples_only on\n")
        f.write("CREATE TEMP TABLE accepted (saga_id uuid PRIMARY KEY);\n")
        f.write("COPY accepted FROM stdin;\n%s\n\\.\n" % "\n".join(ids))
        f.write("SELECT count(*) FILTER (WHERE s.state IN %s), count(s.saga_id),"
                " count(*) FILTER (WHERE s.state = 'Completed') FROM accepted a"
                " LEFT JOIN orchestrator.saga_instances s USING (saga_id);\n"
                % repr(TERMINAL))

    def counts():
        try:
            out = sy.psql_file(path).strip().splitlines()[-1].split("|")
            return [int(x) for x in out]
        except (RuntimeError, ValueError, IndexError):
            return [-1, -1, -1]
    done = wait(lambda: counts()[0] == len(ids), 300, 1)
    term, found, completed = counts()
    checks.ok(found == len(ids), "every saga answered 201 exists: %d of %d" % (found, len(ids)))
    checks.ok(done, "every saga answered 201 is terminal: %d of %d" % (term, len(ids)))
    r = subprocess.run([AUDIT, sy.url()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    checks.ok(r.returncode == 0, "the audit is clean (no effect twice, balances to the unit)")
    if r.returncode != 0:
        print(r.stdout, flush=True)
    dead = int(sy.scalar("SELECT (SELECT count(*) FROM orchestrator.outbox_messages"
                         " WHERE dead_at IS NOT NULL) + (SELECT count(*) FROM"
                         " payment.outbox_messages WHERE dead_at IS NOT NULL) + (SELECT"
                         " count(*) FROM inventory.outbox_messages WHERE dead_at IS NOT NULL)"))
    checks.ok(dead == 0, "no dead letter in the outboxes: %d" % dead)
    for s, p in sy.procs.items():
        checks.ok(p.poll() is None and p.pid == pids[s], "saga-%s never restarted" % s)
    return len(ids), completed
