#!/usr/bin/python3
"""`docker compose up` for real (issue #8): the stack a user starts first,
built and run by a real Docker engine, and the README's tour run against it.

1. A Docker engine: the one that answers, else `dockerd` started here (as
   root) and stopped again by its pid at the end.
2. The base images (debian:bookworm[-slim], postgres:15-bookworm): when one
   is missing, built by ../shared/tools/docker-standin/build.sh where that
   folder is beside the project, or beside the repository this checkout was
   cloned from when that is a folder on this machine (CI's clone; no
   registry is reachable on the project's machines), else `docker pull`.
   SAGA_DOCKER_STANDIN names another folder.
3. `docker compose up --build -d` (the v2 plugin, else Debian's
   `docker-compose` v1) under a project name of this run's own, with the
   orchestrator published on a free port (ORCHESTRATOR_PORT); every
   container healthy and the one-shot seed exited 0; the services run as
   uid 10001.
4. The README's "Five-minute tour", command by command: each `curl` is sent
   to the published port, each `psql` runs in the postgres container as the
   URL's role, and the compose section's `docker compose exec postgres
   psql` line runs as written. What the tour promises is checked: an order
   of an item sql/demo-seed.sql stocks ends `Completed`, one of an item it
   has none of (B001) ends `Compensated` with its payment refunded, the same
   key and body again is a replay (`Idempotent-Replayed: true`, same saga),
   a different body under that key is `422 idempotency_key_reused`. Then
   shipping (saga-participant on sql/shipping/, loaded at init): a saga of
   order-with-shipping, the definition the image carries, ends `Completed`
   with its trackingId, one to "nowhere" `Compensated`.
5. `down` (keeping the volume) and `up -d` again: the sagas are still there
   and a new order completes.
6. `down -v`; then no container, network or volume of the project is left,
   nor any anonymous volume a container of it mounted.
   The image pgsaga:local stays, as the build cache of the next run (the
   one it replaces, if any, is removed).

With `--profile amqp` (README, "The same tour in containers"), steps 1-3 and 6 with the broker:
`TRANSPORT=amqp docker compose --profile amqp up --build -d` adds the
rabbitmq:3.10-management service (built by the same stand-in builder where
no registry is reachable); every container healthy, the three services on
TRANSPORT=amqp, the orchestrator's /readyz says the broker is up, an order
of A001 ends `Completed` and one of B001 `Compensated`, the orchestrator's
metrics count confirmed publishes and acked deliveries, and the broker holds
the queues pgsaga.orchestrator, pgsaga.payment, pgsaga.inventory and
pgsaga.shipping; the two sagas of order-with-shipping end as over HTTP.

With `--tls` (README, "TLS in containers"), steps 1-3 and 6 with the override
docker-compose.tls.yml: scripts/compose-certs makes the CA and certificates
in a directory of this run's own (PGSAGA_TLS_DIR), `docker compose -f
docker-compose.yml -f docker-compose.tls.yml up --build -d` (the image the
other runs build: cached), and every container healthy, which the services'
health check reaches over HTTPS only. Then an order of A001 ends `Completed`,
placed and followed over HTTPS with a client certificate, verified against
the run's CA with 127.0.0.1 as the host name; the orchestrator's metrics
count client handshakes (it called its peers over https://); a plain HTTP
request to the published port gets no HTTP answer; from the orchestrator's
container, payment's and inventory's /readyz answer the health check over
HTTPS and not over plain HTTP; an internal endpoint with
the right bearer token but no client certificate is `403
client_certificate_required`; PostgreSQL refuses `sslmode=disable` ("no
pg_hba.conf entry ... no encryption") from the compose network, accepts
`sslmode=verify-full` against the CA by its service name, and every session
of the three services' roles is over TLS (pg_stat_ssl).

With `--tls --profile amqp` (README, "TLS in containers", over RabbitMQ),
both: the tls override, the amqp profile and TRANSPORT=amqp, RabbitMQ TLS
only (docker/rabbitmq-tls.sh). The checks of `--tls` on the published port
(the others do not depend on the transport), the checks of `--profile amqp`
with every request over HTTPS (but the queues' names), and: every broker
connection is TLS and presents its service's certificate (`rabbitmqctl
list_connections ssl peer_cert_subject`), rabbitmq:5672 refuses a
connection from the orchestrator's container, and there `openssl s_client`
with the orchestrator's certificate gets the AMQP connection.start frame
for the protocol header, without a certificate nothing.

Standard library only; Debian's /usr/bin/python3.
"""

import concurrent.futures
import http.client as httpclient
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
from sagatest.core import SRC, Checks, Response, die, free_port, request

checks = Checks("compose-up")
COMPOSE_FILE = os.path.join(SRC, "docker-compose.yml")
TLS_COMPOSE_FILE = os.path.join(SRC, "docker-compose.tls.yml")
PROJECT = "pgsagatest%d" % os.getpid()
BASE_IMAGES = ("debian:bookworm", "debian:bookworm-slim", "postgres:15-bookworm")
RABBITMQ_IMAGE = "rabbitmq:3.10-management"
BUILD_STAGE_LABEL = "label=org.pgsaga.stage=build"  # the Dockerfile's LABEL
STANDIN_BESIDE = os.path.join("..", "shared", "tools", "docker-standin")
SERVICE_IMAGE = "pgsaga:local"
# the three services and shipping (saga-participant, sql/shipping/)
SAGA_SERVICES = ("orchestrator", "payment", "inventory", "shipping")
TERMINAL = ("Completed", "Compensated", "Failed")
T0 = time.monotonic()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def run(argv, timeout=120, env=None, quiet=False):
    """Runs argv, output captured; returns the CompletedProcess (returncode
    124 on a timeout)."""
    if not quiet:
        log("$ " + " ".join(shlex.quote(a) for a in argv))
    try:
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.output.decode() if isinstance(e.output, bytes) else (e.output or "")
        return subprocess.CompletedProcess(argv, 124, out + "\n(timed out after %ds)" % timeout)


def must(argv, timeout=120, env=None):
    r = run(argv, timeout, env)
    if r.returncode != 0:
        die("%s failed (exit %d):\n%s" % (argv[:3], r.returncode, r.stdout[-4000:]))
    return r.stdout


# --- the engine and the images -------------------------------------------------

def docker_answers():
    return run(["docker", "info"], 30, quiet=True).returncode == 0


def start_dockerd(workdir):
    """Starts dockerd when no engine answers; returns its Popen or None."""
    if docker_answers():
        log("a Docker engine is running: using it")
        return None
    if os.geteuid() != 0:
        die("no Docker engine answers and only root can start dockerd here")
    dockerd = shutil.which("dockerd") or die("dockerd not found: scripts/deps installs docker.io")
    out = open(os.path.join(workdir, "dockerd.log"), "w")
    proc = subprocess.Popen([dockerd], stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log("started dockerd, pid %d" % proc.pid)
    deadline = time.monotonic() + 90
    while not docker_answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            out.flush()
            tail = open(out.name).read()[-3000:]
            stop_dockerd(proc)
            die("dockerd did not come up:\n" + tail)
        time.sleep(0.5)
    return proc


def stop_dockerd(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log("stopped dockerd (pid %d, exit %s)" % (proc.pid, proc.returncode))


def image_id(name):
    r = run(["docker", "image", "inspect", "-f", "{{.Id}}", name], 30, quiet=True)
    return r.stdout.strip() if r.returncode == 0 else None


def prune_build_stages(keep=2):
    """The build stage's images stay behind untagged, as the cache of the
    next build; each change of the sources makes another. Keeps the newest
    few, removes the rest (an image still in use stays: fine)."""
    r = run(["docker", "images", "--no-trunc", "-f", "dangling=true", "-f", BUILD_STAGE_LABEL,
             "--format", "{{.CreatedAt}}\t{{.ID}}"], 30, quiet=True)
    old = sorted(r.stdout.splitlines(), reverse=True)[keep:]
    if old:
        run(["docker", "rmi"] + [line.split("\t")[1] for line in old], 120)


def standin_build():
    """The stand-in builder's build.sh (README, step 2), or None."""
    if os.environ.get("SAGA_DOCKER_STANDIN"):
        dirs = [os.environ["SAGA_DOCKER_STANDIN"]]
    else:
        dirs = [os.path.join(SRC, STANDIN_BESIDE)]
        origin = subprocess.run(["git", "-C", SRC, "remote", "get-url", "origin"],
                                capture_output=True, text=True).stdout.strip()
        if os.path.isdir(origin):
            dirs.append(os.path.join(origin, STANDIN_BESIDE))
    return next((os.path.join(d, "build.sh") for d in dirs
                 if os.path.isfile(os.path.join(d, "build.sh"))), None)


def ensure_base_images(images):
    missing = [i for i in images if image_id(i) is None]
    if not missing:
        return
    build = standin_build()
    if build:
        log("missing %s: building them with %s" % (missing, build))
        must(["bash", build], 1200)
    else:
        for i in missing:
            must(["docker", "pull", i], 900)
    missing = [i for i in images if image_id(i) is None]
    if missing:
        die("base images still missing: %s" % missing)


# --- compose ---------------------------------------------------------------------

def compose_base():
    if run(["docker", "compose", "version"], 30, quiet=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return die("neither `docker compose` nor docker-compose: scripts/deps installs docker-compose")


class Stack:
    def __init__(self, port, profiles=(), transport="http", tls_dir=None):
        self.cmd = compose_base() + ["-p", PROJECT, "-f", COMPOSE_FILE]
        if tls_dir:
            self.cmd += ["-f", TLS_COMPOSE_FILE]
        self.cmd += ["--project-directory", SRC]
        for p in profiles:
            self.cmd += ["--profile", p]
        self.env = dict(os.environ, ORCHESTRATOR_PORT=str(port), TRANSPORT=transport)
        self.env.pop("PGSAGA_TLS_DIR", None)
        if tls_dir:
            self.env["PGSAGA_TLS_DIR"] = tls_dir
        self.env.pop("COMPOSE_PROJECT_NAME", None)
        self.env.pop("COMPOSE_FILE", None)
        self.port = port
        self.https = None     # an HTTPS once the run's certificates are made
        self.volumes = set()  # every volume a container of the project mounted
        self.before = None    # container ids before the build

    def request(self, method, path, body=None, headers=None):
        """A request to the published port: over HTTPS with the client
        certificate when the stack runs with the tls file, else plain."""
        if self.https:
            return self.https.request(method, path, body=body, headers=headers)
        return request(self.port, method, path, body=body, headers=headers)

    def ids(self):
        return run(["docker", "ps", "-aq", "--filter", "label=com.docker.compose.project="
                    + PROJECT], 30, quiet=True).stdout.split()

    def note_volumes(self):
        """Remembers the volumes the containers mount, the anonymous ones
        (no project label) included, so that the end can check them."""
        ids = self.ids()
        if ids:
            r = run(["docker", "inspect", "-f",
                     '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}'] + ids,
                    30, quiet=True)
            self.volumes |= set(r.stdout.split())

    def note_containers(self):
        """Remembers the containers there are before the build: a failed
        build step leaves its container behind, with no project label."""
        self.before = set(run(["docker", "ps", "-aq", "--no-trunc"], 30, quiet=True)
                          .stdout.split())

    def build_leftovers(self):
        """Stopped containers made since note_containers() that belong to
        no compose project: what a failed build step left."""
        if self.before is None:
            return []
        r = run(["docker", "ps", "-aq", "--no-trunc", "-f", "status=exited", "-f",
                 "status=created", "-f", "status=dead"], 30, quiet=True)
        new = [c for c in r.stdout.split() if c not in self.before]
        if not new:
            return []
        r = run(["docker", "inspect", "-f",
                 '{{.Id}} {{index .Config.Labels "com.docker.compose.project"}}'] + new,
                30, quiet=True)
        rows = [line.split(None, 1) + [""] for line in r.stdout.splitlines() if line.strip()]
        return [row[0] for row in rows if row[1].strip() in ("", "<no value>")]

    def down(self, *args, timeout=180):
        self.note_volumes()
        return self.run("down", *args, timeout=timeout)

    def run(self, *args, timeout=300):
        return run(self.cmd + list(args), timeout, self.env)

    def must(self, *args, timeout=300):
        return must(self.cmd + list(args), timeout, self.env)

    def exec_argv(self, service, *argv):
        return self.cmd + ["exec", "-T", service] + list(argv)

    def docker_exec(self, service, *argv, env=None):
        """argv in service's container by `docker exec`: what `compose exec`
        does, without the seconds docker-compose v1 takes to start."""
        ids = run(["docker", "ps", "-q", "--filter", "label=com.docker.compose.project=" + PROJECT,
                   "--filter", "label=com.docker.compose.service=" + service], 30,
                  quiet=True).stdout.split()
        if len(ids) != 1:
            die("service %s: containers %r" % (service, ids))
        cmd = ["docker", "exec"]
        for k, v in (env or {}).items():
            cmd += ["-e", "%s=%s" % (k, v)]
        return run(cmd + [ids[0]] + list(argv), 60)

    def containers(self):
        """service -> (status, health, exit code) of the project's containers."""
        ids = self.ids()
        if not ids:
            return {}
        fmt = ('{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} '
               '{{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}} {{.State.ExitCode}}')
        r = run(["docker", "inspect", "-f", fmt] + ids, 30, quiet=True)
        out = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) == 4:
                out[parts[0]] = tuple(parts[1:])
        return out

    def wait_ready(self, services, timeout=300):
        """Every service healthy (the one-shot seed: exited 0)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.containers()
            bad = {s: v for s, v in state.items()
                   if s == "seed" and v[0] == "exited" and v[2] != "0"}
            pending = [s for s in services
                       if s not in state
                       or (s == "seed" and state[s][0] != "exited")
                       or (s != "seed" and state[s][1] != "healthy")]
            if bad or not pending or time.monotonic() > deadline:
                break
            time.sleep(1)
        ok = checks.ok(not bad and not pending, "stack ready: waiting for %s, failed %s (%r)"
                       % (pending, bad, state))
        if ok:
            log("ready: %r" % state)
        return ok

    def logs(self):
        print(self.run("logs", "--no-color", "--tail", "60", timeout=60).stdout[-12000:],
              flush=True)

    def leftovers(self):
        found = {}
        for kind in ("container", "network", "volume"):
            argv = (["docker", "ps", "-aq"] if kind == "container"
                    else ["docker", kind, "ls", "-q"])
            out = run(argv + ["--filter", "label=com.docker.compose.project=" + PROJECT],
                      30, quiet=True).stdout.split()
            if out:
                found[kind] = out
        have = set(run(["docker", "volume", "ls", "-q"], 30, quiet=True).stdout.split())
        anonymous = sorted((self.volumes & have) - set(found.get("volume", [])))
        if anonymous:
            found["volume"] = found.get("volume", []) + anonymous
        built = self.build_leftovers()
        if built:
            found["container"] = found.get("container", []) + built
        return found

    def destroy(self):
        """down -v, and then nothing of the project may be left; what is is
        removed by force (and the check fails)."""
        r = self.down("-v", "--remove-orphans", "--timeout", "20")
        checks.ok(r.returncode == 0, "down -v exits 0: %s" % r.stdout[-2000:])
        left = self.leftovers()
        checks.ok(not left, "down -v leaves nothing of project %s: %r" % (PROJECT, left))
        for c in left.get("container", []):
            run(["docker", "rm", "-f", "-v", c], 60)
        for kind in ("network", "volume"):
            for x in left.get(kind, []):
                run(["docker", kind, "rm", x], 60)


# --- the README's tour -------------------------------------------------------------

def readme_commands():
    """The shell commands of the README's "Five-minute tour" section (its
    compose part included), continuation lines joined, comments dropped."""
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    m = re.search(r"^## Five-minute tour\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        die("README.md has no '## Five-minute tour' section")
    cmds = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", m.group(1), re.S | re.M):
        pending = ""
        for line in block.replace("\\\n", " ").splitlines():
            pending += line + "\n"
            try:
                argv = shlex.split(pending, comments=True)
            except ValueError:
                continue  # a quoted string goes on over the next line
            pending = ""
            if argv:
                cmds.append(argv)
        if pending:
            die("README: unterminated command %r" % pending)
    return cmds


def parse_curl(argv):
    """(method, path, headers, body) of a README curl line."""
    method, url, headers, body = None, None, {}, None
    it = iter(argv[1:])
    for a in it:
        if a == "-H":
            k, v = next(it).split(":", 1)
            headers[k.strip()] = v.strip()
        elif a in ("-d", "--data", "--data-raw"):
            body = next(it)
        elif a == "-X":
            method = next(it)
        elif a.startswith("-"):
            checks.ok(set(a[1:]) <= set("si"), "curl option %s understood" % a)
        else:
            url = a
    m = re.match(r"https?://[^/]+(/.*)$", url or "")
    if not m:
        die("curl line without a URL: %r" % argv)
    return method or ("POST" if body is not None else "GET"), m.group(1), headers, body


def seeded_stock():
    sql = open(os.path.join(SRC, "sql", "demo-seed.sql"), encoding="utf-8").read()
    return {item: int(n) for item, n in re.findall(r"\(\s*'([\w-]+)'\s*,\s*(\d+)\s*\)", sql)}


def wait_terminal(stack, saga_id, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        r = stack.request("GET", "/orders/" + saga_id)
        state = r.json().get("state") if r.status == 200 else None
        if state in TERMINAL or time.monotonic() > deadline:
            return r
        time.sleep(0.3)


class Tour:
    """Runs the README's commands against the stack and checks what the
    README promises of each."""

    def __init__(self, stack):
        self.stack = stack
        self.stock = seeded_stock()
        self.first = {}         # key -> (body as a value, saga id)
        self.sagas = {}         # saga id -> final state
        self.last_saga = None
        self.seen = set()       # what the tour showed: completed, compensated, ...
        self.sql_out = []

    def curl(self, argv):
        method, path, headers, body = parse_curl(argv)
        path = path.replace("<sagaId>", self.last_saga or "none")
        r = self.stack.request(method, path, body=body, headers=headers)
        log("%s %s -> %s %s" % (method, path, r.status, r.body[:200]))
        if method == "POST" and path == "/orders":
            self.order(headers.get("Idempotency-Key"), json.loads(body), r)
        elif method == "GET" and path.startswith("/orders/"):
            checks.ok(r.status == 200 and r.json().get("sagaId") == self.last_saga,
                      "GET %s: %r" % (path, r))

    def order(self, key, value, r):
        if key not in self.first:
            if not checks.ok(r.status == 201 and r.json().get("duplicated") is False,
                             "new order %s: 201, not duplicated (%r)" % (key, r)):
                return
            saga = r.json()["sagaId"]
            self.first[key] = (value, saga)
            self.last_saga = saga
            final = wait_terminal(self.stack, saga)
            state = final.json().get("state") if final.status == 200 else final
            enough = self.stock.get(value["itemId"], 0) >= value["qty"]
            want = "Completed" if enough else "Compensated"
            checks.ok(state == want, "order %s for %s (seeded %s): %s, want %s"
                      % (key, value["itemId"], self.stock.get(value["itemId"]), state, want))
            self.sagas[saga] = state
            self.seen.add(state)
            if state == "Compensated":
                path = [h.get("toState") for h in final.json().get("history", [])]
                checks.ok(path == ["PendingPayment", "PendingInventory", "Compensating",
                                   "Compensated"], "compensation path %r" % path)
            return
        value0, saga = self.first[key]
        if value == value0:
            self.seen.add("replay")
            checks.ok(r.status == 201 and r.header("Idempotent-Replayed") == "true"
                      and r.json().get("duplicated") is True and r.json().get("sagaId") == saga,
                      "replay of %s: 201, Idempotent-Replayed, same saga (%r %r)"
                      % (key, r, r.headers))
        else:
            self.seen.add("reused")
            checks.ok(r.status == 422
                      and r.json().get("error", {}).get("code") == "idempotency_key_reused",
                      "key %s with another body: 422 idempotency_key_reused (%r)" % (key, r))

    def psql(self, argv):
        """psql "postgresql://ROLE@host:port/db" ... runs in the postgres
        container as ROLE on the same database."""
        m = re.match(r"postgres(?:ql)?://([^@:/]+)@[^/]+/(\w+)$", argv[1]) if len(argv) > 1 else None
        if not checks.ok(m is not None, "README psql line names a role and database: %r" % argv):
            return
        self.sql(self.stack.exec_argv("postgres", "psql", "-X", "-v", "ON_ERROR_STOP=1",
                                      "-U", m.group(1), m.group(2)) + argv[2:], argv)

    def docker_compose(self, argv):
        if argv[2:4] != ["exec", "postgres"]:
            return  # up, down: the test does those itself
        self.seen.add("compose-psql")
        self.sql(self.stack.exec_argv("postgres", *argv[4:]), argv)

    def sql(self, full, readme_argv):
        r = run(full, 60, self.stack.env)
        print(r.stdout, flush=True)
        checks.ok(r.returncode == 0, "README line %r: exit %d" % (readme_argv[:4], r.returncode))
        self.sql_out.append((readme_argv, r.stdout))

    def run(self):
        for argv in readme_commands():
            if argv[0] == "curl":
                self.curl(argv)
            elif argv[0] == "psql":
                self.psql(argv)
            elif argv[:2] == ["docker", "compose"]:
                self.docker_compose(argv)
        for what in ("Completed", "Compensated", "replay", "reused", "compose-psql"):
            checks.ok(what in self.seen, "the README's tour shows %s (saw %s)"
                      % (what, sorted(self.seen)))
        # the tour's payment query shows the compensated saga's refund
        everything = "".join(out for argv, out in self.sql_out)
        for saga, state in self.sagas.items():
            if state == "Compensated":
                checks.ok(re.search(re.escape(saga) + r".*refunded", everything) is not None,
                          "the README's psql lines show saga %s refunded" % saga)
        # the compose section's psql line lists the sagas the tour made
        shown = "".join(out for argv, out in self.sql_out if argv[0] == "docker")
        for saga, state in self.sagas.items():
            checks.ok(saga in shown and state in shown,
                      "docker compose exec postgres psql shows saga %s %s" % (saga, state))


# --- the run ---------------------------------------------------------------------------

def check_users(stack):
    for s in SAGA_SERVICES:
        r = run(stack.exec_argv(s, "id", "-u"), 60, stack.env)
        checks.ok(r.stdout.strip() == "10001", "%s runs as uid 10001 (%r)" % (s, r.stdout))


def after_restart(stack, sagas):
    for saga, state in sagas.items():
        r = stack.request("GET", "/orders/" + saga)
        checks.ok(r.status == 200 and r.json().get("state") == state,
                  "after down and up, saga %s is still %s (%r)" % (saga, state, r))
    r = stack.request("POST", "/orders", body={"customerId": "c-restart", "itemId": "A001",
                                               "qty": 1, "amount": 100},
                      headers={"Idempotency-Key": "compose-after-restart"})
    if checks.ok(r.status == 201, "an order after the restart: %r" % r):
        final = wait_terminal(stack, r.json()["sagaId"])
        checks.ok(final.status == 200 and final.json().get("state") == "Completed",
                  "the order after the restart completes (%r)" % final)


def shipped(stack, key, address):
    """A saga of order-with-shipping (the definition the image carries, the
    orchestrator registers and shipping runs the last step of); its final
    body, or None."""
    r = stack.request("POST", "/sagas/order-with-shipping",
                      body={"customerId": "c-compose", "itemId": "A001", "qty": 1, "amount": 100,
                            "address": address}, headers={"Idempotency-Key": key})
    if not checks.ok(r.status == 201, "order-with-shipping %s: %r" % (key, r)):
        return None
    saga = r.json()["sagaId"]
    end = time.monotonic() + 90
    while time.monotonic() < end:
        got = stack.request("GET", "/sagas/" + saga)
        body = got.json() if got.status == 200 else {}
        if body.get("state") in ("Completed", "Failed", "Compensated"):
            return body
        time.sleep(0.5)
    return None


def shipping_run(stack):
    """shipping in containers: a saga of order-with-shipping completes with
    its trackingId; one to "nowhere" is compensated."""
    done = shipped(stack, "compose-ship-1", "1 Main St")
    checks.ok(done is not None and done["state"] == "Completed"
              and done.get("outputs", {}).get("Shipping", {}).get("trackingId", "")
              .startswith("TRK-"), "order-with-shipping to 1 Main St: %r" % done)
    done = shipped(stack, "compose-ship-2", "nowhere")
    checks.ok(done is not None and done["state"] == "Compensated",
              "order-with-shipping to nowhere: %r" % done)


def order(stack, key, item):
    """An order of one unit; its final state, or None."""
    r = stack.request("POST", "/orders", body={"customerId": "c-compose", "itemId": item,
                                               "qty": 1, "amount": 100},
                      headers={"Idempotency-Key": key})
    if not checks.ok(r.status == 201, "order %s: %r" % (key, r)):
        return None
    final = wait_terminal(stack, r.json()["sagaId"])
    return final.json().get("state") if final.status == 200 else None


def readme_run(stack, services, timings):
    """The default stack: the README's tour, a restart, the sagas kept."""
    check_users(stack)
    t = time.monotonic()
    tour = Tour(stack)
    tour.run()
    timings["tour"] = time.monotonic() - t
    t = time.monotonic()
    shipping_run(stack)
    timings["shipping"] = time.monotonic() - t
    t = time.monotonic()
    r = stack.down()
    checks.ok(r.returncode == 0, "down: %s" % r.stdout[-2000:])
    stack.must("up", "-d", timeout=600)
    if stack.wait_ready(services):
        after_restart(stack, tour.sagas)
    timings["restart"] = time.monotonic() - t


def amqp_run(stack, services, timings):
    """The amqp profile: the services on the broker, sagas through it."""
    t = time.monotonic()
    for s in SAGA_SERVICES:
        r = stack.docker_exec(s, "printenv", "TRANSPORT")
        checks.ok(r.stdout.strip() == "amqp", "%s has TRANSPORT=amqp (%r)" % (s, r.stdout))
    # healthy is /readyz's 200, which does not wait for the broker: the
    # services may still be in their reconnection backoff (up to 5 s) when
    # RabbitMQ is the last to be ready
    end = time.monotonic() + 60
    while True:
        r = stack.request("GET", "/readyz")
        up = r.status == 200 and (r.json() if r.body else {}).get("broker") == "up"
        if up or time.monotonic() > end:
            break
        time.sleep(0.5)
    checks.ok(up, "orchestrator /readyz: 200, broker up (%r)" % r)
    stock = seeded_stock()
    for item in ("A001", "B001"):
        want = "Completed" if stock.get(item, 0) >= 1 else "Compensated"
        state = order(stack, "compose-amqp-" + item, item)
        checks.ok(state == want, "over amqp, an order of %s (seeded %s): %s, want %s"
                  % (item, stock.get(item), state, want))
    shipping_run(stack)
    # the orchestrator's own count: what it published and received went
    # through the broker (its /metrics is on the published port)
    text = stack.request("GET", "/metrics").body.decode("utf-8", "replace")
    for series in ('saga_amqp_publishes_total{outcome="confirmed"}',
                   'saga_amqp_deliveries_total{outcome="acked"}'):
        m = re.search(r"^%s (\d+)" % re.escape(series), text, re.M)
        checks.ok(m is not None and int(m.group(1)) > 0, "orchestrator metric %s > 0 (%s)"
                  % (series, m.group(1) if m else "absent"))
    # (not again with tls: every rabbitmqctl call starts an Erlang VM, 20 s
    # on a loaded machine, and amqps_run needs one)
    if not stack.https:
        r = stack.docker_exec("rabbitmq", "rabbitmqctl", "-q", "list_queues", "name")
        queues = set(r.stdout.split())
        for s in SAGA_SERVICES:
            checks.ok("pgsaga." + s in queues, "the broker has the queue pgsaga.%s (%r)"
                      % (s, sorted(queues)))
    timings["orders over amqp"] = time.monotonic() - t


class HTTPS:
    """Requests to the published port over HTTPS: the run's CA verifies the
    server (host name 127.0.0.1, which its certificate carries), and the
    client certificate is the run's `tester` one unless cert=False."""

    def __init__(self, port, tls_dir):
        self.port = port
        self.with_cert = ssl.create_default_context(cafile=os.path.join(tls_dir, "ca.crt"))
        self.with_cert.load_cert_chain(os.path.join(tls_dir, "tester.crt"),
                                       os.path.join(tls_dir, "tester.key"))
        self.without_cert = ssl.create_default_context(cafile=os.path.join(tls_dir, "ca.crt"))

    def request(self, method, path, body=None, headers=None, cert=True, timeout=15):
        h = dict(headers or {})
        if body is not None:
            body = json.dumps(body).encode("utf-8")
            h.setdefault("Content-Type", "application/json")
        conn = httpclient.HTTPSConnection(
            "127.0.0.1", self.port, timeout=timeout,
            context=self.with_cert if cert else self.without_cert)
        try:
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        except (OSError, httpclient.HTTPException) as e:
            return Response(0, {"error": repr(e)}, b"")
        finally:
            conn.close()


def plain_answer(port):
    """What a plain-text HTTP request to port gets back: the bytes, up to
    4 kB, until the server closes the connection (or 10 s pass); None when
    the connection could not be made at all."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return None
    got = b""
    with s:
        try:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            while len(got) < 4096:
                c = s.recv(4096)
                if not c:
                    break
                got += c
        except OSError:
            pass
    return got


def make_certs(tls_dir):
    """The CA and certificates of docker-compose.tls.yml, by the script the
    README gives, and a client certificate of the test's own."""
    must([os.path.join(SRC, "scripts", "compose-certs"), tls_dir], 60)
    must([os.path.join(SRC, "scripts", "certs"), "issue", tls_dir, "tester"], 60)


def tls_run(stack, timings, amqp):
    """The tls override: HTTPS only with client certificates, the peers
    over https://, PostgreSQL TLS only. With amqp, the checks of the
    published port only: the rest does not depend on the transport (the
    same listeners and DATABASE_URLs), compose-tls checks it, and each
    `docker exec` costs seconds on a loaded machine."""
    t = time.monotonic()
    https = stack.https
    r = https.request("GET", "/healthz")
    checks.ok(r.status == 200 and r.header("Strict-Transport-Security") is not None,
              "answers over HTTPS carry Strict-Transport-Security (%r %r)" % (r, r.headers))
    # clear text gets no HTTP answer
    got = plain_answer(stack.port)
    checks.ok(got is not None and re.match(rb"HTTP/1\.[01] \d{3}", got) is None,
              "plain HTTP to the published port: connected, no HTTP answer (%r)"
              % (got if got is None else got[:80]))
    # the internal endpoints need a client certificate, after the token
    token = stack.env.get("INTERNAL_TOKEN") or "pgsaga-local-internal-token"
    auth = {"Authorization": "Bearer " + token}
    r = https.request("POST", "/events/NoSuchEvent", body={}, headers=auth, cert=False)
    checks.ok(r.status == 403 and b"client_certificate_required" in r.body,
              "an internal endpoint without a client certificate: 403 (%r)" % r)
    r = https.request("POST", "/events/NoSuchEvent", body={}, headers=auth)
    checks.ok(r.status not in (0, 401, 403),
              "the same with the client certificate gets past the check (%r)" % r)
    if amqp:
        timings["checks over TLS"] = time.monotonic() - t
        return
    # payment and inventory, not published, on the compose network: their
    # health check's HTTPS request answers, its plain one does not
    for s, port in (("payment", 8081), ("inventory", 8082)):
        addr = {"LISTEN_ADDR": "%s:%d" % (s, port)}
        r = stack.docker_exec("orchestrator", "saga-healthcheck", env=addr)
        checks.ok(r.returncode == 0, "%s answers GET /readyz over HTTPS from the orchestrator's"
                  " container (exit %d %r)" % (s, r.returncode, r.stdout[-300:]))
        r = stack.docker_exec("orchestrator", "env", "-u", "TLS_CERT_FILE", "saga-healthcheck",
                              env=addr)
        checks.ok(r.returncode == 1, "%s gives plain HTTP no answer (health check exit %d)"
                  % (s, r.returncode))
    state = order(stack, "compose-tls-A001", "A001")
    checks.ok(state == "Completed", "an order over HTTPS with a client certificate: %s,"
              " want Completed" % state)
    # the orchestrator called payment and inventory over https://
    text = https.request("GET", "/metrics").body.decode("utf-8", "replace")
    client = sum(int(n) for n in re.findall(
        r'^saga_tls_handshakes_total\{[^}]*side="client"[^}]*\} (\d+)', text, re.M))
    checks.ok(client > 0, "orchestrator made TLS client handshakes to its peers: %d" % client)
    # PostgreSQL: TLS only, from the compose network by its service name
    auditor = {"PGPASSWORD": stack.env.get("AUDITOR_DB_PASSWORD") or "pgsaga-local-auditor"}
    conn = "host=postgres port=5432 dbname=pgsaga user=saga_auditor "

    def psql(sslmode, sql):
        return stack.docker_exec("postgres", "psql", "-X", "-Atc", sql, conn + sslmode,
                                 env=auditor)

    r = psql("sslmode=disable", "select 1")
    checks.ok(r.returncode != 0 and "no encryption" in r.stdout,
              "PostgreSQL refuses sslmode=disable: exit %d, %r" % (r.returncode, r.stdout[-300:]))
    r = psql("sslmode=verify-full sslrootcert=/run/secrets/ca.crt",
             "select ssl from pg_stat_ssl where pid = pg_backend_pid()")
    checks.ok(r.returncode == 0 and r.stdout.strip() == "t",
              "PostgreSQL accepts sslmode=verify-full by its service name: %r" % r.stdout[-300:])
    r = stack.docker_exec("postgres", "psql", "-X", "-U", "postgres", "-d", "pgsaga", "-Atc",
                          "select a.usename, s.ssl from pg_stat_activity a"
                          " join pg_stat_ssl s using (pid)"
                          " where a.usename in ('saga_orchestrator', 'saga_payment',"
                          " 'saga_inventory') order by 1, 2")
    rows = [line.split("|") for line in r.stdout.split()]
    users = {u for u, _ in rows}
    checks.ok(r.returncode == 0 and len(users) == 3 and all(ssl_on == "t" for _, ssl_on in rows),
              "every session of the three services' roles is over TLS: %r" % r.stdout)
    timings["checks over TLS"] = time.monotonic() - t


# From the orchestrator's container, in one `docker exec`: a connection to
# rabbitmq:5672 (refused: no plain listener), then what `openssl s_client`
# gets back from rabbitmq:5671 for the AMQP 0-9-1 protocol header, as hex,
# with the orchestrator's certificate and without one. A broker that
# accepted the handshake answers with the frame of connection.start
# (01 00 00 ...), one that did not closes the connection (nothing). Each
# probe waits for the answer or the close, not a fixed time.
AMQP_PROBES = r"""
probe() {
    coproc S { exec timeout 20 openssl s_client -quiet -connect rabbitmq:5671 \
        -verify_hostname rabbitmq -CAfile /run/secrets/ca.crt -verify_return_error "$@" \
        2>/dev/null; }
    exec 5<&"${S[0]}"
    printf 'AMQP\0\0\x09\x01' >&"${S[1]}"
    timeout 20 head -c 4 <&5 | od -An -tx1 | tr -d ' \n'
    exec 5<&-
    kill "$S_PID" 2>/dev/null
    wait "$S_PID" 2>/dev/null
    echo
}
if why=$( (exec 3<>/dev/tcp/rabbitmq/5672) 2>&1 ); then
    echo "5672: open"
else
    echo "5672: ${why//$'\n'/ }"
fi
echo "with certificate: $(probe -cert "$TLS_CERT_FILE" -key "$TLS_KEY_FILE")"
echo "without certificate: $(probe)"
"""


def amqps_run(stack, timings):
    """The tls override with the amqp profile: the broker TLS only, each
    service's connection over TLS with its own certificate. rabbitmqctl
    (an Erlang VM to start: seconds) runs while the probes do."""
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ctl = pool.submit(stack.docker_exec, "rabbitmq", "rabbitmqctl", "-q", "list_connections",
                          "--no-table-headers", "user", "ssl", "peer_cert_subject")
        probes = stack.docker_exec("orchestrator", "bash", "-c", AMQP_PROBES)
        r = ctl.result()
    rows = [line.split("\t") for line in r.stdout.splitlines() if line.strip()]
    checks.ok(r.returncode == 0 and len(rows) >= len(SAGA_SERVICES)
              and all(len(row) == 3 and row[1] == "true" for row in rows),
              "every broker connection is over TLS: %r" % r.stdout[-1000:])
    subjects = {row[2] for row in rows if len(row) == 3}
    for s in SAGA_SERVICES:
        checks.ok("CN=" + s in subjects, "%s's broker connection presents its certificate"
                  " (peer_cert_subject %r)" % (s, sorted(subjects)))
    got = {}
    for line in probes.stdout.splitlines():
        what, sep, answer = line.partition(": ")
        if sep:
            got[what] = answer.strip()
    checks.ok(probes.returncode == 0 and "Connection refused" in got.get("5672", ""),
              "no plain AMQP: rabbitmq:5672 refuses a connection (%r)" % probes.stdout)
    checks.ok(got.get("with certificate", "").startswith("010000"),
              "amqps with the orchestrator's certificate: connection.start (%r)"
              % probes.stdout)
    checks.ok("without certificate" in got and not got["without certificate"].startswith("01"),
              "amqps without a client certificate: no AMQP answer (%r)" % probes.stdout)
    timings["broker over TLS"] = time.monotonic() - t


def main(amqp, tls):
    workdir = tempfile.mkdtemp(prefix="compose-test-")
    dockerd = None
    stack = None
    timings = {}
    checks.name = "compose-" + ("-".join(n for n, on in (("tls", tls), ("amqp", amqp)) if on)
                                or "up")
    try:
        dockerd = start_dockerd(workdir)
        t = time.monotonic()
        ensure_base_images(BASE_IMAGES + ((RABBITMQ_IMAGE,) if amqp else ()))
        timings["base images"] = time.monotonic() - t
        tls_dir = None
        if tls:
            tls_dir = os.path.join(workdir, "tls")
            make_certs(tls_dir)
        stack = Stack(free_port(), profiles=("amqp",) if amqp else (),
                      transport="amqp" if amqp else "http", tls_dir=tls_dir)
        if tls:
            stack.https = HTTPS(stack.port, tls_dir)
        services = ["postgres", "seed"] + list(SAGA_SERVICES) + (["rabbitmq"] if amqp else [])
        stack.note_containers()
        old_image = image_id(SERVICE_IMAGE)
        t = time.monotonic()
        r = stack.run("up", "--build", "-d", timeout=1200)
        timings["up --build"] = time.monotonic() - t
        if not checks.ok(r.returncode == 0, "up --build -d: exit %d\n%s"
                         % (r.returncode, r.stdout[-4000:])):
            return
        new_image = image_id(SERVICE_IMAGE)
        if old_image and new_image != old_image:
            run(["docker", "rmi", old_image], 60)  # may still be in use elsewhere: fine
        prune_build_stages()
        t = time.monotonic()
        if not stack.wait_ready(services):
            return
        timings["healthy"] = time.monotonic() - t
        if tls:
            tls_run(stack, timings, amqp)
        if amqp:
            amqp_run(stack, services, timings)
        if tls and amqp:
            amqps_run(stack, timings)
        if not tls and not amqp:
            readme_run(stack, services, timings)
    finally:
        if stack is not None:
            if checks.failed:
                stack.logs()
            t = time.monotonic()
            stack.destroy()
            timings["down -v"] = time.monotonic() - t
        stop_dockerd(dockerd)
        shutil.rmtree(workdir, ignore_errors=True)
        log("times: " + ", ".join("%s %.0f s" % kv for kv in timings.items()))


if __name__ == "__main__":
    args = sys.argv[1:]
    with_tls = args[:1] == ["--tls"]
    if args[with_tls:] not in ([], ["--profile", "amqp"]):
        die("usage: test_compose_up.py [--tls] [--profile amqp]")
    main(amqp=bool(args[with_tls:]), tls=with_tls)
    checks.done()
