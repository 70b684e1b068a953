"""Reading the Dockerfile and .dockerignore the way Docker does, as far as
the checks need: stages, their instructions (continuation lines joined),
COPY sources and destinations, and which context paths .dockerignore
leaves in (Docker's rules: patterns in order, `*` and `?` stay within one
path element, `**` crosses them, a pattern also matches everything under a
matching directory, `!` lets a path back in, the last matching pattern
wins).
"""

import json
import os
import re
import shlex


class Stage:
    def __init__(self, base, name):
        self.base = base
        self.name = name
        self.instructions = []  # (KEYWORD, rest)

    def all(self, keyword):
        return [rest for k, rest in self.instructions if k == keyword]


def parse_dockerfile(path):
    text = open(path, encoding="utf-8").read()
    logical, cur = [], ""
    for line in text.splitlines():
        if not cur and (line.strip().startswith("#") or not line.strip()):
            continue
        if cur and line.strip().startswith("#"):
            continue  # comment lines inside a continued instruction are dropped
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        logical.append(cur + line)
        cur = ""
    if cur:
        logical.append(cur)
    stages = []
    for line in logical:
        kw, _, rest = line.strip().partition(" ")
        kw = kw.upper()
        rest = rest.strip()
        if kw == "FROM":
            m = re.match(r"^(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            stages.append(Stage(m.group(1), m.group(2)))
            continue
        if not stages:
            continue  # ARG before FROM
        stages[-1].instructions.append((kw, rest))
    return stages


def copy_args(rest):
    """(flags {name: value}, sources, destination) of a COPY/ADD."""
    flags = {}
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        k, _, v = flag[2:].partition("=")
        flags[k] = v
        rest = rest.strip()
    if rest.startswith("["):
        parts = json.loads(rest)
    else:
        parts = shlex.split(rest)
    return flags, parts[:-1], parts[-1]


def apt_packages(stage):
    """Packages named by `apt-get install` in a stage's RUN instructions."""
    pkgs = []
    for rest in stage.all("RUN"):
        for cmd in re.split(r"&&|;", rest):
            words = cmd.split()
            if "apt-get" in words and "install" in words:
                after = words[words.index("install") + 1:]
                pkgs += [w for w in after if not w.startswith("-")]
    return pkgs


def _translate(pattern):
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out += "/?"
                i += 1
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        else:
            out += re.escape(c)
        i += 1
    return re.compile("^" + out + "$")


class DockerIgnore:
    def __init__(self, path):
        self.patterns = []
        if os.path.exists(path):
            for line in open(path, encoding="utf-8"):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                neg = line.startswith("!")
                p = os.path.normpath(line[1:].strip() if neg else line).lstrip("/")
                self.patterns.append((neg, _translate(p)))

    def excluded(self, rel):
        """rel: a path relative to the context, '/'-separated."""
        rel = os.path.normpath(rel)
        parts = rel.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        result = False
        for neg, rx in self.patterns:
            if any(rx.match(p) for p in prefixes):
                result = not neg
        return result


def context_files(src, ignore, top):
    """Files under src/top (a file or a directory) that the context keeps,
    as paths relative to src."""
    full = os.path.join(src, top)
    if os.path.isfile(full):
        return [os.path.normpath(top)] if not ignore.excluded(top) else []
    out = []
    for root, dirs, files in os.walk(full):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            if not ignore.excluded(rel):
                out.append(rel)
    return sorted(out)
