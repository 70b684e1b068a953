#!/usr/bin/python3
"""Every repository path the words name exists.

The words: every Markdown file, docs/openapi.yaml, the headers (*.h), every
file under sql/, scripts/, bench/, docker/, deploy/ and .ci/, and the
meson.build files. In them a path is

- a token that starts at a word boundary with one of the repository's own
  top-level folders (src/ sql/ tests/ scripts/ docs/ bench/ deploy/ docker/
  .ci/) and goes on with path characters: `src/lib/pg/db.h`, `tests/unit/`;
- the target of a Markdown link, `[text](target)`, taken relative to the
  file that holds it (addresses with a scheme aside); its `#anchor`, when
  it names a Markdown file (or is bare, in the same file), must be one of
  that file's headings as GitHub makes anchors of them.

What does not count, by rule rather than by list:

- a token that goes on where another path stands (`build/tests/…`,
  `/tmp/…/src/…`, `.run/…`): the lookbehind refuses a slash, dot, word
  character or dash before the folder's name, so build output and the
  private clusters under .run/ are never taken for repository paths;
- a token with a placeholder in it (`<schema>`, `NNN`, `{name}`, `…`, `$`,
  `X.Y.Z`): a pattern, not a path;
- a token with a glob (`*`): it must match at least one file.

A trailing `.`, `,`, `:`, `;`, `)` or `'` ends a sentence, not the path. A
path may name a file or a folder (with or without its trailing slash).
"""

import glob
import os
import re
import subprocess
import sys

SRC = os.environ.get("SAGA_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TOP = ("src", "sql", "tests", "scripts", "docs", "bench", "deploy", "docker", r"\.ci")
PATH = re.compile(r"(?<![\w./@~$-])((?:%s)/[A-Za-z0-9_./*+<>{}…$-]*)" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>{}…$]|NNN|X\.Y\.Z")


def tracked():
    """The repository's files (git's list when it is a checkout, else a walk
    that leaves build directories and .run out)."""
    r = subprocess.run(["git", "-C", SRC, "ls-files", "-co", "--exclude-standard"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if r.returncode == 0 and r.stdout:
        return [f for f in r.stdout.splitlines() if os.path.exists(os.path.join(SRC, f))]
    out = []
    for d, dirs, files in os.walk(SRC):
        rel = os.path.relpath(d, SRC)
        dirs[:] = [x for x in dirs if not (x.startswith(("build", ".run", ".git")))]
        out += [os.path.normpath(os.path.join(rel, f)) for f in files]
    return out


def is_words(f):
    base = os.path.basename(f)
    if f.endswith(".md") or f.endswith(".h") or base == "meson.build":
        return True
    if f == "docs/openapi.yaml":
        return True
    top = f.split("/", 1)[0]
    return top in ("sql", "scripts", "bench", "docker", "deploy", ".ci") and not f.endswith(
        (".png", ".gz", ".xz"))


def exists(path):
    if "*" in path:
        return bool(glob.glob(os.path.join(SRC, path)))
    return os.path.exists(os.path.join(SRC, path))


def candidates(f, text):
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,:;)'")
        if PLACEHOLDER.search(p):
            continue
        yield text.count("\n", 0, m.start()) + 1, p, p
    if f.endswith(".md"):
        for m in LINK.finditer(text):
            target = m.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            rel = os.path.normpath(os.path.join(os.path.dirname(f), target))
            yield text.count("\n", 0, m.start()) + 1, m.group(1), rel


def anchors(path):
    """The anchors GitHub makes of a Markdown file's headings."""
    out, seen = set(), {}
    text = open(os.path.join(SRC, path), encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for m in re.finditer(r"^#{1,6} +(.*?) *#*$", text, re.M):
        a = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else "%s-%d" % (a, n))
    return out


def bad_anchors(f, text):
    for m in LINK.finditer(text):
        target = m.group(1)
        if "#" not in target or re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, anchor = target.split("#", 1)
        path = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not path.endswith(".md") or not os.path.exists(os.path.join(SRC, path)):
            continue
        if anchor not in anchors(path):
            yield text.count("\n", 0, m.start()) + 1, target


def main():
    missing = []
    files = [f for f in tracked() if is_words(f)]
    if not files:
        sys.exit("no files to read under %s" % SRC)
    for f in sorted(files):
        try:
            text = open(os.path.join(SRC, f), encoding="utf-8").read()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for line, shown, path in candidates(f, text):
            if not exists(path):
                missing.append("%s:%d: %s does not exist" % (f, line, shown))
        if f.endswith(".md"):
            for line, target in bad_anchors(f, text):
                missing.append("%s:%d: %s names no heading" % (f, line, target))
    print("read %d files" % len(files))
    for m in missing:
        print(m)
    if missing:
        print("%d paths named in the words do not exist: fix the words (or the path)"
              % len(missing))
        return 1
    print("every path named exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
