#!/usr/bin/python3
"""docs/openapi.yaml passes Redocly CLI's recommended rules with no error.

Setup: installs @redocly/cli from the npm registry into the build directory
(tests/docs/redocly-VERSION, its npm cache beside it) the first time, never
at build time. The version is pinned: 2.77.0 runs on Node.js 20.19 or later
(later releases need Node.js 22), and a pinned linter gives the same verdict
on every run. Without node and npm, or with a Node.js too old for it, the
test is skipped (exit 77) and says so.

Then `redocly lint --extends recommended --format json docs/openapi.yaml`:
any error fails; a warning fails too unless it is listed in ALLOWED below
with its reason.
"""

import json
import os
import re
import shutil
import subprocess
import sys

SRC = os.environ.get("SAGA_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
BUILD = os.environ.get("SAGA_BUILD_DIR") or os.path.join(SRC, "build")
VERSION = "2.77.0"
HOME = os.path.join(BUILD, "tests", "docs", "redocly-" + VERSION)
BIN = os.path.join(HOME, "node_modules", ".bin", "redocly")

# (rule, JSON pointer) -> why the warning stays
ALLOWED = {
    ("no-unused-components", "#/components/responses/UnknownPath"):
        "the answer to any path the document does not list: OpenAPI 3.0 has no place for "
        "answers common to every path, so the introduction names it and the ops-openapi "
        "test checks real answers against it",
    ("no-unused-components", "#/components/responses/MethodNotAllowed"):
        "the answer to a listed path with a method it does not have: as UnknownPath",
}


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(77)


def setup():
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        skip("node and npm are needed to install @redocly/cli (Node.js 20.19 or later)")
    v = subprocess.run([node, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    m = re.match(r"v(\d+)\.(\d+)", v)
    if not m or (int(m.group(1)), int(m.group(2))) < (20, 19):
        skip("Node.js %s is older than @redocly/cli %s needs (20.19)" % (v, VERSION))
    if os.path.exists(BIN):
        return
    os.makedirs(HOME, exist_ok=True)
    r = subprocess.run([npm, "install", "--prefix", HOME, "--cache", os.path.join(HOME, "cache"),
                        "--no-audit", "--no-fund", "--no-save", "@redocly/cli@" + VERSION],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0 or not os.path.exists(BIN):
        sys.exit("npm install @redocly/cli@%s failed (exit %d):\n%s"
                 % (VERSION, r.returncode, r.stdout[-3000:]))


def main():
    setup()
    env = dict(os.environ, REDOCLY_TELEMETRY="off", REDOCLY_SUPPRESS_UPDATE_NOTICE="true",
               NO_COLOR="1")
    r = subprocess.run([BIN, "lint", "--extends", "recommended", "--format", "json",
                        "docs/openapi.yaml"], cwd=SRC, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    try:
        report = json.loads(r.stdout)
    except ValueError:
        sys.exit("redocly lint (exit %d) printed no JSON report:\n%s%s"
                 % (r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    print("redocly %s: %s" % (report.get("version"), report.get("totals")))
    failed = 0
    for p in report.get("problems", []):
        loc = (p.get("location") or [{}])[0]
        where = "%s line %s" % (loc.get("pointer"), (loc.get("start") or {}).get("line"))
        why = ALLOWED.get((p["ruleId"], loc.get("pointer")))
        if p["severity"] == "warn" and why:
            print("warning kept: %s %s: %s (%s)" % (p["ruleId"], where, p["message"], why))
            continue
        failed += 1
        print("%s: %s %s: %s" % (p["severity"], p["ruleId"], where, p["message"]))
    if failed:
        print("%d problems: fix docs/openapi.yaml (or list a warning in ALLOWED with its "
              "reason)" % failed)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
