#!/usr/bin/python3
"""The deployment files (deploy/) and what `meson install` puts where.

    test_deploy.py rules    deploy/prometheus/pgsaga-rules.yml passes
                            `promtool check rules`, and `promtool test rules`
                            runs tests/deploy/rules_test.yml against it
    test_deploy.py units    the systemd units meson generated name the
                            installed binaries, carry the hardening, pass
                            `systemd-analyze verify` and score at most 1.5
                            in `systemd-analyze security --offline`
    test_deploy.py install  `meson install` into a DESTDIR under the build
                            directory installs exactly the binaries,
                            bootstrap.sql, the units, the rules and the
                            documents, byte for byte

meson passes where things go (DEPLOY_PREFIX, DEPLOY_BINDIR, DEPLOY_DATADIR,
DEPLOY_UNITDIR: absolute, before any DESTDIR) and the built binaries
(DEPLOY_BINARIES, name=path separated by spaces). Tools: promtool (Debian:
prometheus), systemd-analyze (Debian: systemd); scripts/deps installs both.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.realpath(os.environ.get("SAGA_SOURCE_DIR")
                       or os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.realpath(os.environ.get("SAGA_BUILD_DIR") or os.getcwd())
SERVICES = ("orchestrator", "payment", "inventory", "participant")
# each binary's unit file, its settings' file, and the name it is verified as
# (saga-participant's is a template: one instance per participant)
UNITS = {s: ("saga-%s.service" % s, "/etc/pgsaga/%s.env" % s, "saga-%s.service" % s)
         for s in SERVICES[:3]}
UNITS["participant"] = ("saga-participant@.service", "/etc/pgsaga/%i.env",
                        "saga-participant@shipping.service")
RULES = os.path.join(SRC, "deploy", "prometheus", "pgsaga-rules.yml")
# systemd-analyze security's overall exposure, 0.0 (none) to 10.0; what is
# left is the network, which the services need
MAX_EXPOSURE = 1.5

# What every unit must say: the hardening, the settings' file, the stop.
HARDENING = {
    "Type": "exec",
    "DynamicUser": "yes",
    "NoNewPrivileges": "yes",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "PrivateUsers": "yes",
    "PrivateMounts": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes",
    "RestrictSUIDSGID": "yes",
    "LockPersonality": "yes",
    "MemoryDenyWriteExecute": "yes",
    "SystemCallArchitectures": "native",
    "KillSignal": "SIGTERM",
    "Restart": "on-failure",
}

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def tool(name, package):
    path = shutil.which(name)
    if not path:
        sys.exit("FATAL: %s not found (Debian: %s; scripts/deps installs it)" % (name, package))
    return path


def run(cmd, cwd=None):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.stdout.strip():
        print(r.stdout.rstrip(), flush=True)
    return r


def env_path(name):
    v = os.environ.get(name)
    if not v:
        sys.exit("FATAL: %s is not set (run through meson test)" % name)
    return v


def read_unit(path):
    """A unit file as {key: [values]} (a key may repeat), sections ignored."""
    keys = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        k, _, v = line.partition("=")
        keys.setdefault(k.strip(), []).append(v.strip())
    return keys


def test_rules():
    import yaml

    promtool = tool("promtool", "prometheus")
    doc = yaml.safe_load(open(RULES, encoding="utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    names = [r["alert"] for r in rules]
    check(len(names) == len(set(names)), "alert names repeat: %s" % names)
    for r in rules:
        check(r.get("labels", {}).get("severity") in ("page", "ticket"),
              "%s: severity is neither page nor ticket" % r["alert"])
        check(r.get("annotations", {}).get("summary"), "%s: no summary" % r["alert"])
    shedding = [r for r in rules if r["alert"] == "PgsagaShedding"]
    check(shedding and "saga_admission_refused_total" in shedding[0]["expr"],
          "no PgsagaShedding rule on saga_admission_refused_total")

    r = run([promtool, "check", "rules", RULES])
    check(r.returncode == 0, "promtool check rules failed")
    check("SUCCESS: %d rules found" % len(rules) in r.stdout,
          "promtool did not find the %d rules" % len(rules))
    r = run([promtool, "test", "rules", os.path.join(SRC, "tests", "deploy", "rules_test.yml")])
    check(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool test rules failed")


def binaries():
    return dict(b.split("=", 1) for b in env_path("DEPLOY_BINARIES").split())


def verify_unit(analyze, tmp, name, text):
    """systemd-analyze verify on text saved as tmp/name: its diagnostics."""
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    r = run([analyze, "verify", "--man=no", "--generators=no", path])
    return r.returncode, r.stdout.strip()


def test_units():
    analyze = tool("systemd-analyze", "systemd")
    bindir = env_path("DEPLOY_BINDIR")
    built = binaries()
    tmp = tempfile.mkdtemp(prefix="units-", dir=os.path.join(BUILD, "tests", "deploy"))
    try:
        for s in SERVICES:
            unit, env_file, name = UNITS[s]
            generated = os.path.join(BUILD, "deploy", unit)
            keys = read_unit(generated)
            want_exec = os.path.join(bindir, "saga-" + s)
            check(keys.get("ExecStart") == [want_exec],
                  "%s: ExecStart %s, expected %s" % (name, keys.get("ExecStart"), want_exec))
            check(keys.get("EnvironmentFile") == [env_file],
                  "%s: EnvironmentFile %s" % (name, keys.get("EnvironmentFile")))
            for k, v in HARDENING.items():
                check(keys.get(k) == [v], "%s: %s=%s, expected %s=%s"
                      % (name, k, keys.get(k), k, v))
            check(keys.get("SystemCallFilter", [None])[0] == "@system-service",
                  "%s: SystemCallFilter does not start from @system-service" % name)
            stop = keys.get("TimeoutStopSec", ["0"])[0]
            # the services drain for up to 10 s after SIGTERM
            check(re.fullmatch(r"\d+s", stop) and int(stop[:-1]) > 10,
                  "%s: TimeoutStopSec=%s leaves no time for the 10 s drain" % (name, stop))

            # verify wants ExecStart to exist: the same unit, naming the
            # binary where the build left it (the install test checks the
            # installed path)
            text = open(generated, encoding="utf-8").read()
            variant = re.sub(r"^ExecStart=.*$", "ExecStart=" + built[s], text, flags=re.M)
            rc, out = verify_unit(analyze, tmp, name, variant)
            check(rc == 0 and out == "", "%s: systemd-analyze verify: %s" % (name, out or rc))
            r = run([analyze, "security", "--offline=true",
                     "--threshold=%d" % int(MAX_EXPOSURE * 10), os.path.join(tmp, name)])
            level = re.search(r"Overall exposure level for \S+: (\d+\.\d)", r.stdout)
            check(r.returncode == 0 and level and float(level.group(1)) <= MAX_EXPOSURE,
                  "%s: exposure %s over %.1f" % (name, level and level.group(1), MAX_EXPOSURE))

        # and verify does find what is wrong: a misspelt key, a missing binary
        _, out = verify_unit(analyze, tmp, "saga-typo.service",
                             variant.replace("ProtectSystem=", "ProtectSystm="))
        check("ProtectSystm" in out, "systemd-analyze verify let a misspelt key pass")
        rc, out = verify_unit(analyze, tmp, "saga-missing.service", text)
        # (the last unit's: text names its installed binary)
        if not os.path.exists(os.path.join(bindir, "saga-" + s)):
            check(rc != 0 and "saga-" + s in out,
                  "systemd-analyze verify let a missing ExecStart binary pass")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def files_under(root):
    out = set()
    for d, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def test_install():
    prefix = env_path("DEPLOY_PREFIX")
    bindir = env_path("DEPLOY_BINDIR")
    datadir = env_path("DEPLOY_DATADIR")
    unitdir = env_path("DEPLOY_UNITDIR")
    destdir = os.path.join(BUILD, "tests", "deploy", "destdir")
    shutil.rmtree(destdir, ignore_errors=True)
    try:
        r = run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir", destdir])
        if not check(r.returncode == 0, "meson install failed"):
            return

        def inside(path):
            return os.path.join(destdir, path.lstrip("/"))

        docdir = os.path.join(datadir, "doc", "pgsaga")
        want = {}  # installed path -> source file with the same bytes, or None
        for b in ("saga-orchestrator", "saga-payment", "saga-inventory", "saga-participant",
                  "saga-bench"):
            want[os.path.join(bindir, b)] = None
        want[os.path.join(datadir, "pgsaga", "bootstrap.sql")] = os.path.join(SRC, "sql", "bootstrap.sql")
        want[os.path.join(datadir, "pgsaga", "prometheus", "pgsaga-rules.yml")] = RULES
        for s in SERVICES:
            want[os.path.join(unitdir, UNITS[s][0])] = os.path.join(BUILD, "deploy", UNITS[s][0])
        for doc in ("README.md", "CHANGELOG.md"):
            want[os.path.join(docdir, doc)] = os.path.join(SRC, doc)
        for doc in files_under(os.path.join(SRC, "docs")):
            want[os.path.join(docdir, doc)] = os.path.join(SRC, "docs", doc)

        got = {os.path.join("/", p) for p in files_under(destdir)}
        check(not got - set(want), "installed but not expected: %s" % sorted(got - set(want)))
        check(not set(want) - got, "expected but not installed: %s" % sorted(set(want) - got))
        for path, source in sorted(want.items()):
            if path not in got:
                continue
            if source is None:
                check(os.access(inside(path), os.X_OK), "%s is not executable" % path)
            else:
                check(same_bytes(inside(path), source), "%s differs from %s" % (path, source))
        # the units start what was installed
        for s in SERVICES:
            keys = read_unit(inside(os.path.join(unitdir, UNITS[s][0])))
            exe = keys.get("ExecStart", [""])[0]
            check(exe.startswith(prefix + "/") and os.access(inside(exe), os.X_OK),
                  "%s: ExecStart %s is not an installed binary" % (UNITS[s][0], exe))
        print("installed %d files under %s" % (len(got), destdir), flush=True)
    finally:
        shutil.rmtree(destdir, ignore_errors=True)


def main():
    tests = {"rules": test_rules, "units": test_units, "install": test_install}
    if len(sys.argv) != 2 or sys.argv[1] not in tests:
        sys.exit("usage: test_deploy.py rules|units|install")
    tests[sys.argv[1]]()
    if failed:
        sys.exit("%d check(s) failed" % len(failed))
    print("ok", flush=True)


if __name__ == "__main__":
    main()
