#!/usr/bin/python3
"""The Dockerfile's build stage, replayed without Docker.

Puts together what the build stage would see (the files its COPY lines
name, less what .dockerignore leaves out of the context) in a scratch
directory, runs the stage's meson/install commands there with /build and
/out moved into the scratch directory, and runs each installed binary with
--help. A COPY line missing a directory the build needs (say a new
subdir() in the top meson.build), or a .dockerignore pattern that drops a
source file, fails here instead of in `docker build` on someone else's
machine. The apt-get line is not replayed: the packages it names are the
ones this machine builds with (scripts/deps).
"""

import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest import dockerfile
from sagatest.core import SRC, SERVICES, Checks, tmpdir

checks = Checks("docker-context")


def main():
    stages = dockerfile.parse_dockerfile(os.path.join(SRC, "Dockerfile"))
    ignore = dockerfile.DockerIgnore(os.path.join(SRC, ".dockerignore"))
    build = stages[0]
    scratch = tmpdir("docker-context-")
    try:
        workdir = "/"
        ctx_root = os.path.join(scratch, "root")
        commands = []
        for kw, rest in build.instructions:
            if kw == "WORKDIR":
                workdir = os.path.join(workdir, rest)
            elif kw == "COPY":
                flags, srcs, dest = dockerfile.copy_args(rest)
                if "from" in flags:
                    continue
                base = os.path.join(ctx_root, os.path.join(workdir, dest).lstrip("/"))
                for s in srcs:
                    files = dockerfile.context_files(SRC, ignore, s)
                    checks.ok(bool(files), "COPY %s: nothing in the context" % s)
                    top = os.path.normpath(s)
                    for f in files:
                        if os.path.isdir(os.path.join(SRC, s)):
                            target = os.path.join(base, os.path.relpath(f, top))
                        else:
                            target = os.path.join(base, os.path.basename(f)) if dest.endswith(
                                "/") else base
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        shutil.copy2(os.path.join(SRC, f), target)
            elif kw == "RUN" and "apt-get" not in rest:
                commands.append((workdir, rest))
        checks.ok(bool(commands), "the build stage has RUN commands to replay")
        out_dir = None
        for wd, cmd in commands:
            # absolute paths of the image (/build, /out) move under the scratch root
            local = re.sub(r"(?<![\w./-])/(build|out)(?=[/\s]|$)",
                           lambda m: os.path.join(ctx_root, m.group(1)), cmd)
            if "/out" in cmd:
                out_dir = os.path.join(ctx_root, "out")
            cwd = os.path.join(ctx_root, wd.lstrip("/"))
            print("replaying in %s: %s" % (wd, cmd), flush=True)
            r = subprocess.run(["bash", "-ec", local], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if not checks.ok(r.returncode == 0, "RUN %s: exit %d:\n%s"
                             % (cmd, r.returncode, r.stdout[-4000:])):
                checks.done()
        if not checks.ok(out_dir is not None, "the build stage installs into /out"):
            checks.done()
        for s in SERVICES + ("participant",):
            exe = os.path.join(out_dir, "saga-" + s)
            r = subprocess.run([exe, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={"PATH": "/usr/bin:/bin"})
            checks.ok(r.returncode == 0 and "DATABASE_URL" in r.stdout,
                      "saga-%s from the replayed build runs --help: %d %s"
                      % (s, r.returncode, r.stderr))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    checks.done()


if __name__ == "__main__":
    main()
