"""The console's files as the orchestrator serves them (docs/protocol.md, "admin API"), over
plain HTTP: nothing without ADMIN_TOKEN; with it, each file with its
Content-Type, the Content-Security-Policy, nosniff, an entity tag that
answers 304; and the rules the files themselves keep: under 100 KB
together, no inline script or style, nothing from another origin, no
markup built from strings in the script.
"""

import os
import re
import sys

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
from sagatest import core

CSP = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
FILES = {"": "text/html", "index.html": "text/html", "console.js": "text/javascript",
         "sagas.js": "text/javascript", "delivery.js": "text/javascript",
         "definitions.js": "text/javascript",
         "console.css": "text/css", "favicon.svg": "image/svg+xml"}
ADMIN_TOKEN = "browser-serving-admin-token-%d" % os.getpid()


def main():
    c = core.Checks("browser-serving")
    with core.System("serving") as s:
        port = s.ports["orchestrator"]
        # Without ADMIN_TOKEN the console does not exist.
        for path in ("/console/", "/console", "/console/console.js", "/console/nothing"):
            r = core.request(port, "GET", path)
            c.ok(r.status == 404, "without ADMIN_TOKEN GET %s is 404, got %r" % (path, r))

        s.extra_env["orchestrator"] = {"ADMIN_TOKEN": ADMIN_TOKEN}
        s.stop_service("orchestrator")
        s.start_service("orchestrator")
        s.wait_ready("orchestrator")

        r = core.request(port, "GET", "/console")
        c.ok(r.status == 301 and r.header("Location") == "/console/",
             "GET /console redirects to /console/, got %r %s" % (r, r.header("Location")))

        total = 0
        bodies = {}
        for name, ctype in FILES.items():
            r = core.request(port, "GET", "/console/" + name)
            if not c.ok(r.status == 200, "GET /console/%s is 200, got %r" % (name, r)):
                continue
            if name:
                bodies[name] = r.body
                total += len(r.body)
            c.ok((r.header("Content-Type") or "").startswith(ctype),
                 "%s has Content-Type %s, got %s" % (name or "/console/", ctype,
                                                     r.header("Content-Type")))
            c.ok(r.header("Content-Security-Policy") == CSP,
                 "%s carries the CSP, got %r" % (name, r.header("Content-Security-Policy")))
            c.ok(r.header("X-Content-Type-Options") == "nosniff", "%s carries nosniff" % name)
            c.ok(r.header("Cache-Control") == "no-cache",
                 "%s: Cache-Control no-cache (revalidate), got %r" % (name, r.header("Cache-Control")))
            etag = r.header("ETag")
            if c.ok(bool(etag), "%s has an ETag" % name):
                again = core.request(port, "GET", "/console/" + name,
                                     headers={"If-None-Match": etag})
                c.ok(again.status == 304 and again.body == b"",
                     "%s with its ETag is 304 without a body, got %r" % (name, again))
        c.ok(bodies.get("index.html") == core.request(port, "GET", "/console/").body,
             "/console/ is index.html")
        # What embed.py compiled in is the files, byte for byte.
        for name, body in bodies.items():
            with open(os.path.join(core.SRC, "src", "orchestrator", "console", name), "rb") as f:
                c.ok(f.read() == body, "%s is served as it is in the source tree" % name)
        for path in ("/console/nothing.js", "/console/../main.c", "/console/console.js/x"):
            r = core.request(port, "GET", path)
            c.ok(r.status == 404, "GET %s is 404, got %r" % (path, r))
        r = core.request(port, "POST", "/console/", b"")
        c.ok(r.status == 405, "POST /console/ is 405, got %r" % r)

        print("console size: %d bytes (%s)" % (total, ", ".join(
            "%s %d" % (k, len(v)) for k, v in sorted(bodies.items()))), flush=True)
        c.ok(0 < total < 100 * 1024, "the console's files together are under 100 KB: %d" % total)

        text = {k: v.decode("utf-8") for k, v in bodies.items()}
        html = text.get("index.html", "")
        scripts = {k: v for k, v in text.items() if k.endswith(".js")}
        c.ok(not re.search(r"<script(?![^>]*\bsrc=)", html), "index.html has no inline script")
        c.ok(not re.search(r"<style|\sstyle=|\son[a-z]+=", html, re.I),
             "index.html has no inline style or event handler attribute")
        for name, js in scripts.items():
            for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                        "new Function"):
                c.ok(bad not in js, "%s does not use %s" % (name, bad))
        for src in re.findall(r'<script src="([^"]+)"', html):
            c.ok(src in scripts, "index.html loads %s, which is served" % src)
        for name, body in text.items():
            if name == "favicon.svg":
                continue
            urls = re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", body, re.I)
            c.ok(not urls, "%s loads nothing from another origin: %s" % (name, urls))
            c.ok("@import" not in body and "url(" not in body.replace("url(#", ""),
                 "%s pulls in no other file" % name)
    c.done()


if __name__ == "__main__":
    main()
