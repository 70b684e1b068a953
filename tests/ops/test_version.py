#!/usr/bin/python3
"""The build says which release and commit it is, the same way everywhere.

The version is set in one place, meson.build's project(version:). Each
binary's `--version` prints exactly one line, `pgsaga X.Y.Z (commit C)`, and
exits 0; each service's /healthz answers the same version and commit, and
its /metrics exports `saga_build_info{version="X.Y.Z",commit="C"} 1`. In a
git checkout C is (a prefix of) HEAD. The version has an entry in
CHANGELOG.md.
"""

import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest.core import BUILD, SERVICES, SRC, Checks, System, binary, request

checks = Checks("version")
LINE = re.compile(r"^pgsaga ([0-9]+\.[0-9]+\.[0-9]+) \(commit ([0-9a-f]{7,40})\)\n$")


def project_version():
    """project(..., version : 'X.Y.Z', ...) of the top-level meson.build."""
    text = open(os.path.join(SRC, "meson.build"), encoding="utf-8").read()
    m = re.search(r"^project\((.*?)\)", text, re.M | re.S)
    v = m and re.search(r"\bversion\s*:\s*'([^']*)'", m.group(1))
    if not v:
        sys.exit("FATAL: no project(version:) in meson.build")
    return v.group(1)


def git_head():
    """HEAD's full hash when SRC is the top of a git checkout, else None."""
    try:
        top = subprocess.run(["git", "-C", SRC, "rev-parse", "--show-toplevel"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != SRC:
            return None
        return subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                              text=True, check=True).stdout.strip()
    except OSError:
        return None


def version_line(path):
    r = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, env={"PATH": os.environ["PATH"],
                                       "ASAN_OPTIONS": "detect_leaks=0"})
    name = os.path.basename(path)
    checks.ok(r.returncode == 0, "%s --version exited %d" % (name, r.returncode))
    checks.ok(r.stderr == "", "%s --version wrote to stderr: %r" % (name, r.stderr))
    m = LINE.match(r.stdout)
    checks.ok(m is not None, "%s --version printed %r, want one line "
              "'pgsaga X.Y.Z (commit <7-40 hex>)'" % (name, r.stdout))
    return m.groups() if m else (None, None)


def main():
    want = project_version()
    checks.ok(re.match(r"^[0-9]+\.[0-9]+\.[0-9]+$", want) is not None,
              "meson.build's version %r is not X.Y.Z" % want)
    changelog = open(os.path.join(SRC, "CHANGELOG.md"), encoding="utf-8").read()
    checks.ok(re.search(r"^## \[?%s\]?\b" % re.escape(want), changelog, re.M) is not None,
              "CHANGELOG.md has no '## %s' entry" % want)

    paths = [binary(s) for s in SERVICES] + [os.path.join(BUILD, "src", "bench", "saga-bench")]
    lines = {os.path.basename(p): version_line(p) for p in paths}
    commits = {c for _, c in lines.values()}
    for name, (v, c) in lines.items():
        checks.ok(v == want, "%s --version says %s, meson.build %s" % (name, v, want))
    checks.ok(len(commits) == 1, "the binaries disagree on the commit: %r" % lines)
    commit = lines["saga-orchestrator"][1]
    head = git_head()
    if head and commit:
        checks.ok(head.startswith(commit), "built from commit %s, but HEAD is %s" % (commit, head))
    else:
        print("no git checkout at %s: the commit is not compared with HEAD" % SRC, flush=True)

    with System("version") as sy:
        for s in SERVICES:
            r = request(sy.ports[s], "GET", "/healthz")
            body = json.loads(r.body) if r.status == 200 else {}
            checks.ok(body.get("version") == want and body.get("commit") == commit,
                      "%s /healthz: %s %r, want version %s commit %s"
                      % (s, r.status, body, want, commit))
            text = request(sy.ports[s], "GET", "/metrics").body.decode("utf-8")
            info = [ln for ln in text.splitlines() if ln.startswith("saga_build_info")]
            exp = 'saga_build_info{version="%s",commit="%s"} 1' % (want, commit)
            checks.ok(info == [exp], "%s /metrics: %r, want [%r]" % (s, info, exp))
            checks.ok("# TYPE saga_build_info gauge" in text.splitlines(),
                      "%s /metrics: saga_build_info is not typed gauge" % s)
    checks.done()


if __name__ == "__main__":
    main()
