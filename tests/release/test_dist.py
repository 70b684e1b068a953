#!/usr/bin/python3
"""The release tarball builds and passes the unit suite without git.

`meson dist --no-tests` makes the tarball of HEAD (uncommitted changes are
left out, as in any release); it is unpacked into a fresh directory under
the system's temporary directory, outside the repository, and configured,
built and unit-tested there with a `git` on PATH that always fails, as on a
machine without git. The binaries it builds must say the version of
meson.build and the commit the tarball was made from (its COMMIT file).

Takes about as long as one build plus the unit suite (a minute or two on a
busy machine), so scripts/test runs it once, not again under the sanitizers.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

SRC = os.path.realpath(os.environ.get("SAGA_SOURCE_DIR")
                       or os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.realpath(os.environ.get("SAGA_BUILD_DIR") or os.getcwd())
VERSION = os.environ["SAGA_PROJECT_VERSION"]

failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def run(cmd, env=None, cwd=None):
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout[-6000:], flush=True)
        sys.exit("FATAL: %s exited %d" % (cmd[0] + " " + cmd[1], r.returncode))
    return r.stdout


def git_head():
    r = subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main():
    head = git_head()
    if not head:
        sys.exit("FATAL: %s is not a git checkout: meson dist needs one" % SRC)
    tmp = tempfile.mkdtemp(prefix="pgsaga-dist-")
    made = []
    try:
        if not check(not os.path.realpath(tmp).startswith(SRC + os.sep),
                     "the scratch directory %s is inside the repository" % tmp):
            return
        # the dist tree is a clone of HEAD in BUILD/meson-dist; only the
        # archive (and its checksum) stays there, and is moved out at once
        run(["meson", "dist", "-C", BUILD, "--no-tests", "--allow-dirty", "--formats", "gztar"])
        name = "pgsaga-%s.tar.gz" % VERSION
        archive = os.path.join(BUILD, "meson-dist", name)
        made = [archive, archive + ".sha256sum"]
        if not check(os.path.isfile(archive), "meson dist made no %s" % archive):
            return
        shutil.move(archive, os.path.join(tmp, name))
        with tarfile.open(os.path.join(tmp, name)) as tf:
            members = tf.getnames()
            check(all(m == "pgsaga-" + VERSION or m.startswith("pgsaga-%s/" % VERSION)
                      for m in members), "the tarball has files outside pgsaga-%s/" % VERSION)
            check(not any(re.search(r"(^|/)\.git(/|$)", m) for m in members),
                  "the tarball holds .git")
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 on
                tf.extractall(tmp, filter="data")
            else:
                tf.extractall(tmp)
        src = os.path.join(tmp, "pgsaga-" + VERSION)
        for f in ("meson.build", "CHANGELOG.md", "COMMIT", "sql/bootstrap.sql"):
            check(os.path.isfile(os.path.join(src, f)), "the tarball lacks %s" % f)
        commit = open(os.path.join(src, "COMMIT"), encoding="ascii").read().strip()
        check(re.fullmatch(r"[0-9a-f]{7,40}", commit) is not None and head.startswith(commit),
              "COMMIT says %r, HEAD is %s" % (commit, head))

        # a git that is not there: any call fails as "command not found" does
        nogit = os.path.join(tmp, "nogit")
        os.mkdir(nogit)
        with open(os.path.join(nogit, "git"), "w", encoding="ascii") as f:
            f.write("#!/bin/sh\necho 'git: not on this machine' >&2\nexit 127\n")
        os.chmod(os.path.join(nogit, "git"), 0o755)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("MESON", "SAGA_", "GIT_", "ASAN_", "UBSAN_"))}
        env["PATH"] = nogit + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        env["GIT_CEILING_DIRECTORIES"] = tmp
        build = os.path.join(tmp, "build")
        run(["meson", "setup", build, src], env=env)
        run(["meson", "compile", "-C", build], env=env)
        out = run(["meson", "test", "-C", build, "--suite", "unit", "--print-errorlogs"], env=env)
        check(re.search(r"^Ok:\s+[1-9]", out, re.M) is not None
              and re.search(r"^Fail:\s+0\b", out, re.M) is not None,
              "the unit suite of the tarball did not pass:\n" + out[-2000:])
        for s in ("orchestrator", "payment", "inventory"):
            line = run([os.path.join(build, "src", s, "saga-" + s), "--version"], env=env)
            check(line == "pgsaga %s (commit %s)\n" % (VERSION, commit),
                  "saga-%s --version from the tarball: %r" % (s, line))
    finally:
        for f in made:
            if os.path.exists(f):
                os.unlink(f)
        try:
            os.rmdir(os.path.join(BUILD, "meson-dist"))
        except OSError:
            pass
        if os.environ.get("SAGA_KEEP_TMP") != "1":
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp, flush=True)
    print("dist: %s" % ("FAILED: %d checks" % len(failed) if failed else "ok"), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
