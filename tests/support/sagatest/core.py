"""What every Python test stands on: paths, a check-and-report helper,
processes that die with the test, a small HTTP client, a private PostgreSQL
cluster with psql (PgCluster), and that cluster with the three real services
(System).

Standard library only, plus PyYAML (Debian's python3-yaml) where a test
reads YAML. Run with Debian's /usr/bin/python3: a python3 earlier on PATH
(pyenv and the like) may lack python3-yaml.

Everything a test starts is its own: the cluster lives in a directory of
the build tree and is destroyed at the end, the services are started by
this process (with PR_SET_PDEATHSIG, so they die with it) and stopped by
their pids.
"""

import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from http import client as httpclient

SRC = os.path.realpath(os.environ.get("SAGA_SOURCE_DIR")
                       or os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD = os.path.realpath(os.environ.get("SAGA_BUILD_DIR") or os.getcwd())

SERVICES = ("orchestrator", "payment", "inventory")
PEER_ENV = {"orchestrator": "ORCHESTRATOR_URL", "payment": "PAYMENT_URL",
            "inventory": "INVENTORY_URL"}
PEERS = {"orchestrator": ("payment", "inventory"),
         "payment": ("orchestrator",), "inventory": ("orchestrator",)}


def binary(service):
    return os.path.join(BUILD, "src", service, "saga-" + service)


# --- reporting ------------------------------------------------------------

class Checks:
    """Collects failed checks instead of stopping at the first, so one run
    names everything that is wrong; `done()` prints the verdict and exits."""

    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = []

    def ok(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print("FAIL: " + what, flush=True)
        return cond

    def done(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, len(self.failed)),
              flush=True)
        sys.exit(1 if self.failed else 0)


def die(msg):
    print("FATAL: " + msg, file=sys.stderr, flush=True)
    sys.exit(1)


def need_tool(name, package):
    path = shutil.which(name)
    if not path:
        die("%s not found: install the Debian package %s (scripts/deps does)" % (name, package))
    return path


# --- processes --------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """A Popen preexec_fn: the child is killed when this process dies."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _sigterm_to_exit(signum, frame):
    # meson's timeout sends SIGTERM: unwind, so `finally` stops what we started
    raise SystemExit("terminated by signal %d" % signum)


signal.signal(signal.SIGTERM, _sigterm_to_exit)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv, env, log_path, preexec_fn=die_with_parent):
    """Starts argv with env, stdout and stderr appended to log_path; it dies
    with this process."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, preexec_fn=preexec_fn)


def stop_process(proc, timeout=15):
    """SIGTERM, then SIGKILL after timeout seconds."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def tail(path, n=30):
    """The last n lines of a log."""
    try:
        with open(path, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
    except OSError:
        return "(no log)"


class Running:
    """A context manager for what start() brings up and stop() takes down: a
    start that fails half way stops what it did start."""

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


# --- HTTP -------------------------------------------------------------------

class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case name -> value
        self.body = body        # bytes

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def header(self, name):
        return self.headers.get(name.lower())

    def __repr__(self):
        return "HTTP %s %r" % (self.status, self.body[:300])


def request(port, method, path, body=None, headers=None, timeout=15, host="127.0.0.1"):
    """One request on a new connection to host:port. body: bytes, str, or a
    value sent as JSON. Returns a Response; status 0 when the connection
    closed without an answer."""
    h = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body is not None:
        h.setdefault("Content-Type", "application/json")
    conn = httpclient.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    except (httpclient.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return Response(0, {}, b"")
    finally:
        conn.close()


def raw_request(port, data, timeout=15):
    """Sends data (a whole request, as bytes) as is and parses the answer;
    for what http.client will not send, e.g. a Content-Length without the
    body behind it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                c = s.recv(65536)
            except ConnectionResetError:
                break
            if not c:
                break
            chunks.append(c)
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0]) if lines else None
    if not m:
        return Response(0, {}, raw)
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return Response(int(m.group(1)), headers, body)


# --- a private PostgreSQL cluster ------------------------------------------------

class PgCluster(Running):
    """A private cluster (scripts/pg-cluster) in root/pg on a free port, and
    psql on it. stop() destroys it and removes root (kept with
    OPS_KEEP_RUN=1, for a look after a failure). Use as a context manager."""

    def __init__(self, root, db="postgres", psql_timeout=None):
        self.root = root
        self.cluster = os.path.join(root, "pg")
        self.db = db                     # the database psql uses unless told
        self.psql_timeout = psql_timeout  # seconds a psql may take (None: no bound)
        self.pg_port = None

    def url(self, role=None, db=None):
        return "host=127.0.0.1 port=%d dbname=%s user=%s" % (
            self.pg_port, db or self.db, role or "postgres")

    def pg_cluster(self, *args, check=True):
        env = dict(os.environ, PGSAGA_FAST="1")
        return subprocess.run([os.path.join(SRC, "scripts", "pg-cluster")] + list(args),
                              env=env, check=check, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)

    def start(self):
        os.makedirs(self.root, exist_ok=True)
        for attempt in range(5):
            port = free_port()
            r = self.pg_cluster("start", self.cluster, str(port), check=False)
            if r.returncode == 0:
                self.pg_port = port
                return
            if "already in use" not in r.stderr:
                die("pg-cluster start failed:\n" + r.stderr)
        die("pg-cluster: no free port after 5 tries")

    def stop(self):
        if os.path.isdir(self.cluster):
            self.pg_cluster("destroy", self.cluster, check=False)
        if os.environ.get("OPS_KEEP_RUN") != "1":
            shutil.rmtree(self.root, ignore_errors=True)

    def stop_database(self):
        """Stops the cluster (fast shutdown) and leaves the rest up."""
        self.pg_cluster("stop", self.cluster)

    def create_db(self, db, bootstrap=None):
        """A new database, bootstrapped with the file bootstrap (this tree's
        sql/bootstrap.sql when None)."""
        self.psql("CREATE DATABASE %s" % db, db="postgres")
        self.psql_file(bootstrap or os.path.join(SRC, "sql", "bootstrap.sql"), db=db)

    def psql_cmd(self, role=None, db=None):
        return ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.url(role, db)]

    def run_psql(self, args, timeout=None):
        """psql with args, its completed process. Bounded by timeout seconds
        (self.psql_timeout when None): one that has not finished by then is
        killed, and raises RuntimeError as an SQL error does."""
        timeout = self.psql_timeout if timeout is None else timeout
        try:
            return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError("psql did not finish within %s s: %s"
                               % (timeout, " ".join(args[-2:]))) from None

    def psql(self, sql, role=None, db=None, timeout=None):
        """Runs sql; returns the rows as lists of strings (tab-separated,
        unaligned). Raises on an SQL error, or when timeout (seconds) ends."""
        r = self.run_psql(self.psql_cmd(role, db) + ["-At", "-F", "\t", "-c", sql], timeout)
        if r.returncode != 0:
            raise RuntimeError("psql failed (%s): %s\n%s" % (r.returncode, sql, r.stderr))
        return [line.split("\t") for line in r.stdout.splitlines()]

    def scalar(self, sql, role=None, timeout=None, db=None):
        rows = self.psql(sql, role, db, timeout=timeout)
        return rows[0][0] if rows else None

    def psql_file(self, path, role=None, variables=None, timeout=None, db=None):
        cmd = self.psql_cmd(role, db)
        for k, v in (variables or {}).items():
            cmd += ["-v", "%s=%s" % (k, v)]
        r = self.run_psql(cmd + ["-f", path], timeout)
        if r.returncode != 0:
            raise RuntimeError("psql -f %s failed: %s" % (path, r.stderr))
        return r.stdout

    def wait_sql(self, sql, want, timeout=30, db=None):
        end = time.monotonic() + timeout
        got = None
        while time.monotonic() < end:
            got = self.scalar(sql, db=db)
            if got == want:
                return True
            time.sleep(0.1)
        print("waited %d s for %r = %r; last %r" % (timeout, sql, want, got), flush=True)
        return False


# --- the services ---------------------------------------------------------------

def service_env(service, database_url, listen, token, peers):
    """The settings of saga-<service>: this process's environment without
    what would leak into it (PG*, FAULT_*), then its database, address,
    internal token and peers (peer service -> base URL)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PG", "FAULT_")) and k not in (
               "DATABASE_URL", "LISTEN_ADDR", "INTERNAL_TOKEN", "LOG_LEVEL")}
    env.update({
        "DATABASE_URL": database_url,
        "LISTEN_ADDR": listen,
        "INTERNAL_TOKEN": token,
        "LOG_LEVEL": "info",
    })
    for p in PEERS[service]:
        env[PEER_ENV[p]] = peers[p]
    return env


def wait_ready(proc, port, what, log_path, timeout=30, host="127.0.0.1"):
    """Until the service `what` (proc, on host:port) answers GET /readyz with
    200; dies with its log when it exits or is not ready in time."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            die("%s exited with %s; its log:\n%s" % (what, proc.returncode, tail(log_path)))
        try:
            if request(port, "GET", "/readyz", timeout=2, host=host).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    die("%s not ready after %d s; its log:\n%s" % (what, timeout, tail(log_path)))


class System(PgCluster):
    """A private cluster, one database bootstrapped with sql/bootstrap.sql,
    and the three services on free ports. Use as a context manager."""

    def __init__(self, name, env=None, bootstrap=None, psql_timeout=None):
        super().__init__(os.path.join(BUILD, "tests", "ops-run", "%s-%d" % (name, os.getpid())),
                         "ops_" + re.sub(r"[^a-z0-9_]", "_", name.lower()), psql_timeout)
        self.name = name
        self.extra_env = env or {}       # service -> {NAME: value}
        self.bootstrap = bootstrap       # callable(self) to bootstrap, else psql
        self.token = "ops-test-token-%d" % os.getpid()
        self.procs = {}
        self.ports = {s: free_port() for s in SERVICES}

    def start(self):
        super().start()
        if self.bootstrap:
            self.psql("CREATE DATABASE %s" % self.db, db="postgres")
            self.bootstrap(self)
        else:
            self.create_db(self.db)
        for s in SERVICES:
            self.start_service(s)
        for s in SERVICES:
            self.wait_ready(s)

    def service_env(self, s):
        env = service_env(s, self.url("saga_" + s), "127.0.0.1:%d" % self.ports[s], self.token,
                          {p: "http://127.0.0.1:%d" % self.ports[p] for p in PEERS[s]})
        env.update(self.extra_env.get(s, {}))
        return env

    def addr(self, s):
        """The address service s listens on (a subclass may place services
        elsewhere)."""
        return "127.0.0.1"

    def log_path(self, s):
        return os.path.join(self.root, s + ".log")

    def start_service(self, s):
        self.procs[s] = spawn([binary(s)], self.service_env(s), self.log_path(s))

    def wait_ready(self, s, timeout=30):
        wait_ready(self.procs[s], self.ports[s], "saga-" + s, self.log_path(s), timeout,
                   self.addr(s))

    def stop_service(self, s):
        stop_process(self.procs.pop(s, None))

    def stop(self):
        for s in list(self.procs):
            self.stop_service(s)
        super().stop()

    def tail(self, s, n=30):
        return tail(self.log_path(s), n)

    # --- the saga ---------------------------------------------------------------

    def internal(self):
        return {"Authorization": "Bearer " + self.token}

    def order(self, key, customer="c-1", item="A001", qty=1, amount=1200, headers=None,
              via="orchestrator", timeout=15):
        """POST /orders to the orchestrator (via: another instance's name in
        ports, where a subclass runs several)."""
        h = {"Idempotency-Key": key}
        h.update(headers or {})
        return request(self.ports[via], "POST", "/orders",
                       {"customerId": customer, "itemId": item, "qty": qty, "amount": amount}, h,
                       timeout=timeout, host=self.addr(via))

    def wait_terminal(self, timeout=30):
        """Waits until no saga is in a non-terminal state."""
        return self.wait_sql(
            "SELECT count(*) FROM orchestrator.saga_instances WHERE state NOT IN "
            "('Completed', 'Failed', 'Compensated')", "0", timeout)


def help_text(service):
    """What `saga-<service> --help` prints. Leak checking is off for it: a
    sanitizer build (scripts/test's build-san) is tested for leaks by the
    unit and integration suites, not by reading settings here."""
    r = subprocess.run([binary(service), "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True,
                       env={"PATH": os.environ["PATH"], "ASAN_OPTIONS": "detect_leaks=0"})
    if r.returncode != 0:
        die("saga-%s --help exited %d: %s" % (service, r.returncode, r.stderr))
    return r.stdout


def help_vars(service):
    """The setting names `saga-<service> --help` lists."""
    out = help_text(service)
    names = set(re.findall(r"^  ([A-Z][A-Z0-9_]+) ", out, re.M))
    if not names:
        die("saga-%s --help lists no settings:\n%s" % (service, out))
    return names


def tmpdir(prefix):
    """A scratch directory in the build tree, removed when the test exits
    (kept with OPS_KEEP_RUN=1, for a look after a failure)."""
    os.makedirs(os.path.join(BUILD, "tests", "ops-run"), exist_ok=True)
    d = tempfile.mkdtemp(prefix=prefix, dir=os.path.join(BUILD, "tests", "ops-run"))
    if os.environ.get("OPS_KEEP_RUN") != "1":
        atexit.register(shutil.rmtree, d, True)
    return d
