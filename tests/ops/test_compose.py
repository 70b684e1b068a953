#!/usr/bin/python3
"""docker-compose.yml, the Dockerfile and their helpers, checked offline (no
Docker engine runs here).

- `docker-compose config` (Debian: docker-compose) accepts the file, with
  the local defaults and with .env.example as the env file; .env.example
  names exactly the variables the compose file interpolates.
- Every path the Dockerfile copies exists and survives .dockerignore; every
  bind mount of the compose file exists.
- The runtime stage installs exactly the Debian packages that hold the
  shared libraries the built binaries need (readelf + dpkg -S), plus the
  openssl command for the health check over HTTPS, and runs as a non-root
  user.
- Each service's command is a binary the image installs, and every
  environment variable the compose file gives it is one that binary lists
  in --help (or a libpq variable); the postgres container gets every
  variable docker/initdb.sh requires.
- Shipping (saga-participant running sql/shipping/shipping.sql): the
  postgres container loads that file at init, the shipping service runs
  with the name and commands the file's header gives, and the orchestrator
  knows its URL and registers the definitions the image carries
  (SAGA_DEFINITIONS_DIR, copied from src/orchestrator/definitions/).
- The amqp profile: one rabbitmq service, only in that profile, that every
  service's AMQP_URL points at; TRANSPORT alike in all.
- One demo seed (issue #8): the compose `seed` service and scripts/up both
  load sql/demo-seed.sql, and the stock the README and scripts/up announce
  is the stock that file inserts.
- The rules of issue #5: healthchecks (GET /readyz through the script the
  image installs), depends_on with service_healthy, restart unless-stopped,
  only the orchestrator's port published.
"""

import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
import yaml  # noqa: E402  (Debian: python3-yaml)

from sagatest import dockerfile
from sagatest.core import BUILD, SRC, SERVICES, Checks, binary, help_vars, need_tool
from sagatest.shipping import SHIPPING_ENV

# the binaries of the image: the three services and saga-participant
BINARIES = SERVICES + ("participant",)
DEFINITIONS_DIR = "/usr/local/share/pgsaga/definitions"

checks = Checks("compose")
COMPOSE = os.path.join(SRC, "docker-compose.yml")
ENV_EXAMPLE = os.path.join(SRC, ".env.example")

# libpq reads these from the environment (PostgreSQL manual, "Environment
# Variables"): a container may carry them besides the binary's own settings.
LIBPQ_ENV = {"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD",
             "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGOPTIONS", "PGAPPNAME",
             "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGSSLCRL",
             "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS", "PGCHANNELBINDING",
             "PGGSSENCMODE", "PGTZ", "PGCLIENTENCODING"}
# the official postgres image's own variables
POSTGRES_IMAGE_ENV = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB", "POSTGRES_INITDB_ARGS",
                      "POSTGRES_INITDB_WALDIR", "POSTGRES_HOST_AUTH_METHOD", "PGDATA"}


def compose(*args):
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    return subprocess.run(["docker-compose", "--project-directory", SRC, "-f", COMPOSE]
                          + list(args), cwd=SRC, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def env_names(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        return {e.split("=", 1)[0] for e in env}
    return set(env)


def env_value(svc, name):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env if "=" in e)
    return env.get(name)


def command_of(svc):
    cmd = svc.get("command")
    if isinstance(cmd, str):
        cmd = cmd.split()
    return cmd or []


def check_config():
    r = compose("config", "-q")
    checks.ok(r.returncode == 0, "docker-compose config (local defaults): %s" % r.stderr.strip())
    r = compose("--env-file", ENV_EXAMPLE, "config", "-q")
    checks.ok(r.returncode == 0, "docker-compose --env-file .env.example config: %s"
              % r.stderr.strip())
    raw = open(COMPOSE, encoding="utf-8").read()
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", raw))
    example = set()
    for line in open(ENV_EXAMPLE, encoding="utf-8"):
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=", line)
        if m:
            example.add(m.group(1))
    checks.ok(used == example, ".env.example names the compose file's variables: "
              "missing %s, extra %s" % (sorted(used - example), sorted(example - used)))
    for name in re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", raw):
        checks.ok(False, "${%s} has no local default (use ${%s:-...})" % (name, name))


def check_dockerfile():
    stages = dockerfile.parse_dockerfile(os.path.join(SRC, "Dockerfile"))
    ignore = dockerfile.DockerIgnore(os.path.join(SRC, ".dockerignore"))
    if not checks.ok(len(stages) >= 2, "the Dockerfile is multi-stage"):
        return None
    build, final = stages[0], stages[-1]
    checks.ok(build.base.startswith("debian:bookworm") and not build.base.endswith("-slim"),
              "build stage on debian:bookworm (%s)" % build.base)
    checks.ok(final.base == "debian:bookworm-slim", "runtime on debian:bookworm-slim (%s)"
              % final.base)
    names = {s.name for s in stages if s.name}
    installed = {}  # name in the image -> source
    for st in stages:
        for rest in st.all("COPY") + st.all("ADD"):
            flags, srcs, dest = dockerfile.copy_args(rest)
            if "from" in flags:
                checks.ok(flags["from"] in names, "COPY --from=%s: no such stage" % flags["from"])
                if st is final and dest.startswith("/usr/local/bin"):
                    installed["*from-build*"] = srcs
                continue
            for s in srcs:
                full = os.path.join(SRC, s)
                checks.ok(os.path.exists(full), "Dockerfile copies %s, which does not exist" % s)
                files = dockerfile.context_files(SRC, ignore, s)
                checks.ok(bool(files), "Dockerfile copies %s, which .dockerignore leaves out" % s)
                if os.path.isdir(full):
                    walked = []
                    for root, dirs, fs in os.walk(full):
                        dirs[:] = [d for d in dirs if d != "__pycache__"]
                        walked += [os.path.relpath(os.path.join(root, f), SRC) for f in fs]
                    lost = sorted(set(walked) - set(files))
                    checks.ok(not lost, ".dockerignore drops files under %s: %s" % (s, lost[:5]))
                if st is final:
                    installed[os.path.basename(dest.rstrip("/"))] = s
    # build stage: every pkg-config dependency() of the meson.build files
    # the stage copies has its -dev package installed
    build_pkgs = set(dockerfile.apt_packages(build))
    for mb in sorted(f for top in ("meson.build", "src", "sql", "tests")
                     for f in dockerfile.context_files(SRC, ignore, top)
                     if os.path.basename(f) == "meson.build"):
        text = open(os.path.join(SRC, mb), encoding="utf-8").read()
        for mod in re.findall(r"\bdependency\(\s*'([^']+)'", text):
            if mod == "threads":
                continue  # the C library's, not pkg-config's
            pcdir = subprocess.run(["pkg-config", "--variable=pcfiledir", mod],
                                   stdout=subprocess.PIPE, text=True).stdout.strip()
            r = subprocess.run(["dpkg", "-S", os.path.join(pcdir, mod + ".pc")],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            pkgs = {line.split(":")[0] for line in r.stdout.splitlines()}
            if checks.ok(bool(pkgs), "%s: no Debian package provides %s.pc" % (mb, mod)):
                checks.ok(pkgs & build_pkgs, "%s needs %s: the build stage installs none of %s"
                          % (mb, mod, sorted(pkgs)))
    # the four binaries come from the build stage into the runtime image
    build_text = " ".join(rest for _, rest in build.instructions)
    for s in BINARIES:
        checks.ok("saga-" + s in build_text, "the build stage builds and installs saga-%s" % s)
    checks.ok("*from-build*" in installed, "the runtime stage copies the binaries from the build")
    users = final.all("USER")
    checks.ok(users and users[-1].split(":")[0] not in ("root", "0"),
              "the runtime stage runs as a non-root user (%r)" % users)
    # runtime packages: exactly those holding the libraries the binaries need
    need = set()
    for s in BINARIES:
        # the libraries the binary names itself (NEEDED), not what they pull
        # in: apt brings those along. ldd says which file the loader picks
        # for each; dpkg -S maps it to its package (trying both spellings
        # of a merged-/usr path).
        dyn = subprocess.run(["readelf", "-d", binary(s)], stdout=subprocess.PIPE,
                             text=True).stdout
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
        ldd = subprocess.run(["ldd", binary(s)], stdout=subprocess.PIPE, text=True).stdout
        where = dict(re.findall(r"^\s*(\S+) => (/\S+) \(0x", ldd, re.M))
        where.update({os.path.basename(p): p for p in re.findall(r"^\s*(/\S+) \(0x", ldd, re.M)})
        for lib in needed:
            if re.match(r"^lib(asan|ubsan|tsan|lsan|hwasan)\.so", lib):
                continue  # a sanitizer build's runtime; the image builds without
            if not checks.ok(lib in where, "ldd does not resolve %s (saga-%s)" % (lib, s)):
                continue
            real = os.path.realpath(where[lib])
            tries = {where[lib], real, re.sub(r"^/usr/", "/", real), "/usr" + real}
            pkgs = set()
            for path in tries:
                r = subprocess.run(["dpkg", "-S", path], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
                pkgs |= {line.split(":")[0] for line in r.stdout.splitlines()}
            checks.ok(bool(pkgs), "no Debian package holds %s (needed by saga-%s)" % (lib, s))
            need |= pkgs
    need -= {"libc6"}  # in every Debian image
    # and one command: docker/healthcheck.sh asks a service that listens on
    # HTTPS through `openssl s_client` (docker-compose.tls.yml)
    tools = {"openssl"}
    have = set(dockerfile.apt_packages(final))
    checks.ok(need <= have, "runtime stage lacks packages %s" % sorted(need - have))
    checks.ok(have <= need | tools, "runtime stage installs more than the runtime libraries"
              " and %s: %s" % (sorted(tools), sorted(have - need - tools)))
    return installed


def participant_urls():
    """<NAME>_URL of every participant the shipped definitions name: the
    orchestrator reads them though --help cannot list them all."""
    import json
    names = set()
    d = os.path.join(SRC, "src", "orchestrator", "definitions")
    for f in sorted(os.listdir(d)):
        if f.endswith(".json"):
            for step in json.load(open(os.path.join(d, f), encoding="utf-8"))["steps"]:
                names.add(step["participant"].upper().replace("-", "_") + "_URL")
    return names


def check_services(installed):
    doc = yaml.safe_load(open(COMPOSE, encoding="utf-8"))
    services = doc.get("services") or {}
    helps = {s: help_vars(s) for s in BINARIES}
    initdb = "".join(line for line in open(os.path.join(SRC, "docker", "initdb.sh"),
                                           encoding="utf-8")
                     if not line.lstrip().startswith("#"))
    initdb_required = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*):\?", initdb))
    initdb_reads = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", initdb))
    ports = {}  # compose service -> LISTEN_ADDR port
    brokers = {}  # compose service -> its definition (the amqp profile)
    saga = {}
    for name, svc in services.items():
        cmd = command_of(svc)
        where = "service %s" % name
        for v in svc.get("volumes") or []:
            src = v.split(":")[0] if isinstance(v, str) else v.get("source", "")
            if src.startswith((".", "/")):
                checks.ok(os.path.exists(os.path.join(SRC, src)),
                          "%s mounts %s, which does not exist" % (where, src))
        if cmd and cmd[0].startswith("saga-"):
            service = cmd[0][len("saga-"):]
            if not checks.ok(service in BINARIES, "%s runs %s, not a pgsaga binary"
                             % (where, cmd[0])):
                continue
            saga[name] = service
            checks.ok(cmd[0] in ("saga-" + s for s in BINARIES) and "*from-build*" in installed,
                      "%s: %s is installed in the image" % (where, cmd[0]))
            allowed = helps[service] | LIBPQ_ENV
            if service == "orchestrator":
                allowed |= participant_urls()
            extra = env_names(svc) - allowed
            checks.ok(not extra, "%s: environment not accepted by %s --help: %s"
                      % (where, cmd[0], sorted(extra)))
            for must in ("DATABASE_URL", "INTERNAL_TOKEN", "LISTEN_ADDR"):
                checks.ok(must in env_names(svc), "%s: %s not set" % (where, must))
            m = re.search(r":(\d+)$", env_value(svc, "LISTEN_ADDR") or "")
            ports[name] = m.group(1) if m else None
            checks.ok((env_value(svc, "LISTEN_ADDR") or "").startswith("0.0.0.0:"),
                      "%s: LISTEN_ADDR must listen on all interfaces in a container" % where)
            hc = (svc.get("healthcheck") or {}).get("test") or []
            hc = hc if isinstance(hc, list) else [hc]
            checks.ok(any("saga-healthcheck" in str(t) for t in hc),
                      "%s: healthcheck runs saga-healthcheck (%r)" % (where, hc))
            checks.ok("saga-healthcheck" in installed, "the image installs saga-healthcheck")
            checks.ok(svc.get("restart") == "unless-stopped", "%s: restart unless-stopped" % where)
            dep = svc.get("depends_on") or {}
            checks.ok(isinstance(dep, dict) and dep.get("postgres", {}).get("condition")
                      == "service_healthy", "%s: depends_on postgres service_healthy" % where)
            for other, cond in (dep.items() if isinstance(dep, dict) else []):
                checks.ok(cond.get("condition") == "service_healthy",
                          "%s: depends_on %s is not service_healthy" % (where, other))
            checks.ok((svc.get("build") or {}).get("context") == ".",
                      "%s: built from this repository's Dockerfile" % where)
            published = svc.get("ports") or []
            if service == "orchestrator":
                checks.ok(len(published) == 1 and str(published[0]).endswith(":8080"),
                          "%s: publishes its port 8080 once (%r)" % (where, published))
            else:
                checks.ok(not published, "%s: publishes ports %r" % (where, published))
        elif str(svc.get("image", "")).startswith("postgres:") and not cmd:
            checks.ok(svc.get("restart") == "unless-stopped", "%s: restart unless-stopped" % where)
            checks.ok(bool(svc.get("healthcheck")), "%s: has a healthcheck" % where)
            checks.ok(not svc.get("ports"), "%s: publishes ports" % where)
            missing = initdb_required - env_names(svc)
            checks.ok(not missing, "%s: docker/initdb.sh needs %s" % (where, sorted(missing)))
            extra = env_names(svc) - POSTGRES_IMAGE_ENV - initdb_reads
            checks.ok(not extra, "%s: environment nobody reads: %s" % (where, sorted(extra)))
            mounts = [v for v in svc.get("volumes") or [] if isinstance(v, str)]
            checks.ok(any(m.startswith("./docker/initdb.sh:/docker-entrypoint-initdb.d/")
                          for m in mounts), "%s: docker/initdb.sh in initdb.d" % where)
            boot = env_value(svc, "PGSAGA_BOOTSTRAP") or "/pgsaga/bootstrap.sql"
            checks.ok(any(m.startswith("./sql/bootstrap.sql:%s" % boot) for m in mounts),
                      "%s: sql/bootstrap.sql mounted at %s" % (where, boot))
        elif str(svc.get("image", "")).startswith("rabbitmq:"):
            brokers[name] = svc
        else:
            # one-shot helpers (the demo seed): libpq only, never restarted
            extra = env_names(svc) - LIBPQ_ENV
            checks.ok(not extra, "%s: environment psql does not read: %s" % (where, sorted(extra)))
            checks.ok(svc.get("restart") == "no", "%s: a one-shot job must not restart" % where)
            checks.ok(not svc.get("ports"), "%s: publishes ports" % where)
    checks.ok(sorted(saga.values()) == sorted(BINARIES), "compose runs the three services and"
              " one saga-participant: %r" % saga)
    # peers point at the compose service and port of the peer
    by_service = {v: k for k, v in saga.items()}
    by_service["shipping"] = "shipping" if saga.get("shipping") == "participant" else None
    ports["shipping"] = ports.get(by_service["shipping"])
    peer_env = {"orchestrator": "ORCHESTRATOR_URL", "payment": "PAYMENT_URL",
                "inventory": "INVENTORY_URL", "shipping": "SHIPPING_URL"}
    for name, service in saga.items():
        for peer, var in peer_env.items():
            if var not in helps[service] | (participant_urls() if service == "orchestrator"
                                            else set()):
                continue
            want = "http://%s:%s" % (by_service.get(peer), ports.get(by_service.get(peer)))
            got = env_value(services[name], var)
            checks.ok(got == want, "service %s: %s is %r, want %r" % (name, var, got, want))
    tokens = {env_value(services[n], "INTERNAL_TOKEN") for n in saga}
    checks.ok(len(tokens) == 1, "the services share one INTERNAL_TOKEN: %r" % tokens)
    check_shipping(services, installed)
    check_broker(services, saga, brokers)


def check_shipping(services, installed):
    """shipping: its SQL loaded at init, saga-participant run with the
    settings sql/shipping/shipping.sql's header gives, the orchestrator
    registering the shipped definitions the image carries."""
    ship = services.get("shipping") or {}
    for k, v in SHIPPING_ENV.items():
        checks.ok(env_value(ship, k) == v, "service shipping: %s is %r, want %r"
                  % (k, env_value(ship, k), v))
    header = open(os.path.join(SRC, "sql", "shipping", "shipping.sql"), encoding="utf-8").read()
    checks.ok("PARTICIPANT_COMMANDS='%s'" % SHIPPING_ENV["PARTICIPANT_COMMANDS"] in header,
              "shipping.sql's header gives other commands than the compose file")
    checks.ok("user=saga_shipping" in (env_value(ship, "DATABASE_URL") or ""),
              "service shipping logs in as saga_shipping")
    pg = services.get("postgres") or {}
    mounts = [v for v in pg.get("volumes") or [] if isinstance(v, str)]
    target = env_value(pg, "PGSAGA_SHIPPING") or "/pgsaga/shipping.sql"
    checks.ok("./sql/shipping/shipping.sql:%s:ro" % target in mounts,
              "postgres: sql/shipping/shipping.sql mounted at %s (%r)" % (target, mounts))
    orch = services.get("orchestrator") or {}
    checks.ok(env_value(orch, "SAGA_DEFINITIONS_DIR") == DEFINITIONS_DIR,
              "orchestrator: SAGA_DEFINITIONS_DIR is %r" % env_value(orch, "SAGA_DEFINITIONS_DIR"))
    checks.ok(installed.get("definitions") == "src/orchestrator/definitions/",
              "the image copies src/orchestrator/definitions/ to %s (%r)"
              % (DEFINITIONS_DIR, installed.get("definitions")))
    checks.ok("shipping" in ((orch.get("depends_on") or {})),
              "orchestrator: depends_on shipping")


def check_broker(services, saga, brokers):
    """The amqp profile (README, "The same tour in containers"): one
    RabbitMQ service, only in that profile, that the three services'
    AMQP_URL points at with its own user and password; TRANSPORT the same
    for all three, http unless set."""
    if not checks.ok(len(brokers) == 1, "one rabbitmq service: %r" % sorted(brokers)):
        return
    name, svc = next(iter(brokers.items()))
    where = "service %s" % name
    checks.ok(svc.get("image") == "rabbitmq:3.10-management", "%s: image %r"
              % (where, svc.get("image")))
    checks.ok(svc.get("profiles") == ["amqp"], "%s: only in the profile amqp (%r)"
              % (where, svc.get("profiles")))
    checks.ok(svc.get("restart") == "unless-stopped", "%s: restart unless-stopped" % where)
    checks.ok(bool(svc.get("healthcheck")), "%s: has a healthcheck" % where)
    checks.ok(not svc.get("ports"), "%s: publishes ports" % where)
    checks.ok(bool(svc.get("hostname")), "%s: a fixed hostname (its node name)" % where)
    mounts = [v for v in svc.get("volumes") or [] if isinstance(v, str)]
    checks.ok(any(m.split(":")[1:2] == ["/var/lib/rabbitmq"] and not m.startswith((".", "/"))
                  for m in mounts), "%s: a named volume for /var/lib/rabbitmq (%r)"
              % (where, mounts))
    want = "amqp://%s:%s@%s:5672/%%2f" % (env_value(svc, "RABBITMQ_DEFAULT_USER"),
                                         env_value(svc, "RABBITMQ_DEFAULT_PASS"), name)
    for n in saga:
        checks.ok(env_value(services[n], "AMQP_URL") == want, "service %s: AMQP_URL is %r, want %r"
                  % (n, env_value(services[n], "AMQP_URL"), want))
    transports = {env_value(services[n], "TRANSPORT") for n in saga}
    checks.ok(transports == {"${TRANSPORT:-http}"}, "the services share TRANSPORT, http unless set: %r"
              % transports)


def check_seed():
    """scripts/up and the compose seed service load the same file, and what
    the README and scripts/up say it holds is what it holds."""
    seed = os.path.join(SRC, "sql", "demo-seed.sql")
    if not checks.ok(os.path.exists(seed), "sql/demo-seed.sql exists"):
        return
    sql = open(seed, encoding="utf-8").read()
    stock = re.findall(r"\(\s*'([A-Za-z0-9-]+)'\s*,\s*(\d+)\s*\)", sql)
    checks.ok(len(stock) >= 2, "sql/demo-seed.sql inserts demo stock (%r)" % stock)
    svc = (yaml.safe_load(open(COMPOSE, encoding="utf-8")).get("services") or {}).get("seed")
    if checks.ok(svc is not None, "docker-compose.yml has a seed service"):
        mounts = dict(v.split(":")[:2] for v in svc.get("volumes") or [] if isinstance(v, str))
        target = mounts.get("./sql/demo-seed.sql")
        checks.ok(target is not None, "the seed service mounts ./sql/demo-seed.sql (%r)" % mounts)
        cmd = command_of(svc)
        checks.ok(target is not None and cmd[:1] == ["psql"] and target in cmd,
                  "the seed service runs psql on sql/demo-seed.sql (%r)" % cmd)
    up = open(os.path.join(SRC, "scripts", "up"), encoding="utf-8").read()
    checks.ok("-f sql/demo-seed.sql" in up, "scripts/up loads sql/demo-seed.sql")
    checks.ok("INSERT INTO inventory.stock" not in up, "scripts/up has a seed of its own")
    readme = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    for item, n in stock:
        checks.ok("`%s`: %s" % (item, n) in readme, "README names the demo stock %s: %s"
                  % (item, n))
        checks.ok("%s: %s" % (item, n) in up, "scripts/up announces the demo stock %s: %s"
                  % (item, n))


def check_scripts():
    for script in ("docker/initdb.sh", "docker/healthcheck.sh"):
        path = os.path.join(SRC, script)
        checks.ok(os.access(path, os.X_OK), "%s is executable" % script)
        r = subprocess.run(["bash", "-n", path], stderr=subprocess.PIPE, text=True)
        checks.ok(r.returncode == 0, "bash -n %s: %s" % (script, r.stderr))
    r = subprocess.run([os.path.join(SRC, "docker", "healthcheck.sh")], env={"PATH": "/usr/bin:/bin"},
                       stderr=subprocess.PIPE, text=True)
    checks.ok(r.returncode == 2, "healthcheck.sh without a port is a usage error (%d)"
              % r.returncode)


def main():
    need_tool("docker-compose", "docker-compose")
    for s in BINARIES:
        if not os.path.exists(binary(s)):
            sys.exit("%s missing: build first (BUILD=%s)" % (binary(s), BUILD))
    check_config()
    installed = check_dockerfile() or {}
    check_services(installed)
    check_seed()
    check_scripts()
    checks.done()


if __name__ == "__main__":
    main()
