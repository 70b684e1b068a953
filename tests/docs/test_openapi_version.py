#!/usr/bin/python3
"""docs/openapi.yaml's info.version is the project's version in meson.build."""

import os
import re
import sys

import yaml

SRC = os.environ.get("SAGA_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

meson = open(os.path.join(SRC, "meson.build"), encoding="utf-8").read()
m = re.search(r"^project\([^)]*?version\s*:\s*'([^']+)'", meson, re.S | re.M)
if not m:
    sys.exit("meson.build: no project version")
doc = yaml.safe_load(open(os.path.join(SRC, "docs", "openapi.yaml"), encoding="utf-8"))
have = str(doc.get("info", {}).get("version"))
if have != m.group(1):
    sys.exit("docs/openapi.yaml says info.version %s, meson.build's project %s: make them "
             "the same" % (have, m.group(1)))
print("docs/openapi.yaml info.version %s = meson.build" % have)
