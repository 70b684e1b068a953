"""What the tests of the hosts suite share: running commands on the hosts
(scripts/hosts), moving this process (or a child about to run a service)
into a host's network namespace, a client that posts orders without pause
and records every answer, waiting, the services' metrics, /readyz and log
lines, and the checks every test makes afterwards.

Standard library only; builds on core (System, request).
"""

import calendar
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
import uuid

from .core import BUILD, SRC, Checks, die, request

HOSTS = os.path.join(SRC, "scripts", "hosts")
# a psql of these tests (HostsSystem's, the checks') that has not finished
# by then is a failed check, not a test that hangs until meson kills it: a
# commit under Patroni's strict synchronous mode waits, without end, for a
# synchronous standby
PSQL_TIMEOUT_S = 60
AUDIT_TIMEOUT_S = 180
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1


def begin(name):
    """The start of test hosts-NAME: root only (network namespaces); returns
    its Checks and a new directory of its own under the build tree."""
    if os.geteuid() != 0:
        die("the hosts suite makes network namespaces and must run as root (CI does);"
            " run it with sudo, or leave it out: meson test --no-suite hosts")
    root = os.path.join(BUILD, "tests", "hosts-run", "%s-%d" % (name, os.getpid()))
    os.makedirs(root)
    return Checks("hosts-" + name), root


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run(*args, check=True, env=None, timeout=None):
    """Runs a command; its output as text. Raises when it fails and check.
    One that has not finished within timeout seconds is killed and counts
    as failed (exit status 124, as timeout(1) has it)."""
    try:
        r = subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        r = subprocess.CompletedProcess(list(args), 124, as_text(e.stdout),
                                        as_text(e.stderr) + "(killed after %s s)" % timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(args), r.returncode,
                                                    r.stdout, r.stderr))
    return r


def as_text(out):
    """What a process wrote, as text (TimeoutExpired keeps bytes, or None)."""
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


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


def in_netns(path):
    """A preexec_fn for subprocess.Popen: the child runs in the network
    namespace at path, and is SIGKILLed when this process dies (as
    core's services are)."""
    def pre():
        setns(path)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return pre


def together(*calls):
    """Runs the calls (without arguments) at once, each in a thread of its
    own; once all have returned, raises RuntimeError with what any raised."""
    errors = []

    def one(call):
        try:
            call()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(str(e))
    ts = [threading.Thread(target=one, args=(c,)) for c in calls]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))


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
    (errors; status 0 when none came). With targets (names of orchestrator
    instances in sy.ports), `threads` threads post to each of them, and
    every answer is also kept as (target, begun, answered, status)."""

    def __init__(self, sy, threads=3, targets=None, timeout=15):
        self.sy = sy
        self.timeout = timeout  # seconds an order waits for its answer
        self.accepted = {}
        self.spans = []
        self.error_times = []
        self.statuses = {}  # status of the answers other than 201 (0: none)
        self.answers = []
        self.mu = threading.Lock()
        self.stopping = threading.Event()
        pairs = [(t, k) for t in (targets or [None]) for k in range(threads)]
        self.threads = [threading.Thread(target=self.loop, args=(i, t))
                        for i, (t, _) in enumerate(pairs)]

    @property
    def errors(self):
        with self.mu:
            return len(self.error_times)

    def loop(self, k, target):
        n = 0
        via = {"via": target} if target else {}
        while not self.stopping.is_set():
            n += 1
            begun = time.monotonic()
            try:
                r = self.sy.order(str(uuid.uuid4()), customer="c-%d-%d" % (k, n % 20),
                                  amount=100 + n % 50, timeout=self.timeout, **via)
            except OSError:
                r = None
            now = time.monotonic()
            with self.mu:
                self.answers.append((target, begun, now, r.status if r is not None else 0))
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

    def answered(self, target, t0, t1=float("inf")):
        """(begun, answered, status) of the orders posted to target and
        answered within [t0, t1]."""
        with self.mu:
            return [(b, a, st) for t, b, a, st in self.answers if t == target and t0 <= a <= t1]

    def first_201(self, target, begun_after):
        """Monotonic time of the first 201 from target to an order posted
        after begun_after, or None."""
        with self.mu:
            ts = [a for t, b, a, st in self.answers
                  if t == target and st == 201 and b >= begun_after]
        return min(ts) if ts else None


def drive(client, faults):
    """Runs faults() while client posts orders; the client is stopped
    however faults() ends, and says what it got."""
    client.start()
    try:
        return faults()
    finally:
        client.stop()
        log("client stopped: %d sagas answered 201, %d other answers (by status: %s)"
            % (len(client.accepted), client.errors, client.statuses))


def wait_progress(client, more, timeout):
    """True when `more` orders more than now got their 201 within timeout."""
    want = client.count() + more
    return wait(lambda: client.count() >= want, timeout) is not None


def metric_sum(sy, name):
    """The sum of a metric's series over the services (every instance in
    sy.ports)."""
    total = 0.0
    for s in sy.ports:
        r = request(sy.ports[s], "GET", "/metrics", host=sy.addr(s))
        for line in r.body.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def readyz(sy, s="orchestrator"):
    """Service s's /readyz as a dict when it answers 200, else {}."""
    try:
        r = request(sy.ports[s], "GET", "/readyz", timeout=5, host=sy.addr(s))
        return r.json() if r.status == 200 else {}
    except (OSError, ValueError):
        return {}


def first_completion_after(sy, wall):
    """Seconds from wall (epoch) to the first saga created after it and
    completed, or None (none yet, or the database did not answer)."""
    try:
        v = sy.scalar("SELECT extract(epoch FROM min(updated_at)) FROM"
                      " orchestrator.saga_instances WHERE state = 'Completed'"
                      " AND created_at > to_timestamp(%f)" % wall, timeout=PSQL_TIMEOUT_S)
    except RuntimeError:
        return None  # no primary to ask (a failover): not yet known
    return float(v) - wall if v else None


def log_event(sy, s, what, after):
    """Epoch time of the first log line of service s whose message begins
    with what ("amqp: connection lost", "database connection lost") logged
    after `after`, or None."""
    try:
        with open(sy.log_path(s), encoding="utf-8", errors="replace") as f:
            for line in f:
                if '"' + what not in line:
                    continue
                ts = json.loads(line).get("ts", "")
                t = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
                t += float("0" + ts[19:23]) if ts[19:20] == "." else 0.0
                if t > after:
                    return t
    except (OSError, ValueError):
        pass
    return None


def link_events(sy, s, what):
    """How many "amqp: " lines of service s contain what."""
    try:
        with open(sy.log_path(s), encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if '"amqp: ' in line and what in line)
    except OSError:
        return 0


def amqp_log(sy, last=12):
    """What the links said: when each lost its node and where it went (the
    last lines of each service instance)."""
    for s in sy.ports:
        try:
            with open(sy.log_path(s), encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if '"amqp: ' in line]
        except OSError:
            continue
        for line in lines[-last:]:
            print("%s: %s" % (s, line[:300]), flush=True)


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
        # the temporary table is a write to the catalogs: under Patroni's
        # strict synchronous mode its commit would wait, without end, for a
        # synchronous standby, and this check is about the saga's rows
        f.write("SET synchronous_commit = local;\n")
        f.write("CREATE TEMP TABLE accepted (saga_id uuid PRIMARY KEY);\n")
        f.write("COPY accepted FROM stdin;\n%s\n\\.\n" % "\n".join(ids))
        f.write("SELECT count(*) FILTER (WHERE s.state IN %s), count(s.saga_id),"
                " count(*) FILTER (WHERE s.state = 'Completed') FROM accepted a"
                " LEFT JOIN orchestrator.saga_instances s USING (saga_id);\n"
                % repr(TERMINAL))

    last_error = []

    def counts():
        try:
            out = sy.psql_file(path, timeout=PSQL_TIMEOUT_S).strip().splitlines()[-1].split("|")
            return [int(x) for x in out]
        except (RuntimeError, ValueError, IndexError) as e:
            last_error[:] = [str(e).strip()]
            return [-1, -1, -1]
    done = wait(lambda: counts()[0] == len(ids), 300, 1)
    term, found, completed = counts()
    why = " (%s)" % last_error[0] if term < 0 and last_error else ""
    checks.ok(found == len(ids), "every saga answered 201 exists: %d of %d%s"
              % (found, len(ids), why))
    checks.ok(done, "every saga answered 201 is terminal: %d of %d%s" % (term, len(ids), why))
    # read-only: nothing in it waits for a standby, and no statement may
    # take longer than the whole is given
    r = run(AUDIT, sy.url(), check=False, timeout=AUDIT_TIMEOUT_S,
            env=dict(os.environ, PGOPTIONS="-c statement_timeout=%ds" % (AUDIT_TIMEOUT_S - 30)))
    checks.ok(r.returncode == 0, "the audit is clean (no effect twice, balances to the unit)%s"
              % (" (it did not finish within %d s)" % AUDIT_TIMEOUT_S
                 if r.returncode == 124 else ""))
    if r.returncode != 0:
        print(r.stdout + r.stderr, flush=True)
    try:
        dead = int(sy.scalar("SELECT (SELECT count(*) FROM orchestrator.outbox_messages"
                             " WHERE dead_at IS NOT NULL) + (SELECT count(*) FROM"
                             " payment.outbox_messages WHERE dead_at IS NOT NULL) + (SELECT"
                             " count(*) FROM inventory.outbox_messages WHERE dead_at IS NOT"
                             " NULL)", timeout=PSQL_TIMEOUT_S))
        checks.ok(dead == 0, "no dead letter in the outboxes: %d" % dead)
    except RuntimeError as e:
        checks.ok(False, "no dead letter in the outboxes: %s" % str(e).strip())
    for s, p in sy.procs.items():
        checks.ok(p.poll() is None and p.pid == pids[s], "saga-%s never restarted" % s)
    return len(ids), completed
