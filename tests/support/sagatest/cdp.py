"""A headless Chromium driven over the DevTools protocol, for the browser
suite: Debian's `chromium` and `python3-websocket`, nothing downloaded.

    with Browser(artefacts_dir) as b:
        page = b.page()
        page.goto("http://127.0.0.1:8080/console/")
        page.wait_for("#token")
        page.type_into("#token", "secret")
        page.press("Enter")
        page.screenshot("signin", 1280)

Every page records what would make a person distrust the console: an
uncaught exception, a console.error, an error logged by the browser itself
(a CSP violation, a failed load), and any JavaScript dialog (alert, confirm,
prompt: the XSS probe fires one). `page.problems()` lists them.

The browser runs with a private --user-data-dir in the build tree, is
killed by its pid at the end, and dies with this process (PR_SET_PDEATHSIG).
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import websocket  # Debian: python3-websocket

from .core import BUILD, Running, die, spawn


def chromium_path():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    die("chromium not found: install the Debian package chromium (scripts/deps does)")


class CDPError(Exception):
    pass


class Connection:
    """One DevTools websocket. Commands are answered in order of their id;
    events that arrive meanwhile are handed to on_event."""

    def __init__(self, url, on_event):
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.on_event = on_event

    def call(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        end = time.monotonic() + timeout
        while True:
            if time.monotonic() > end:
                raise CDPError("%s: no answer in %d s" % (method, timeout))
            data = json.loads(self.ws.recv())
            if data.get("id") == mid:
                if "error" in data:
                    raise CDPError("%s: %s" % (method, data["error"].get("message")))
                return data.get("result", {})
            if "method" in data:
                self.on_event(data)

    def send(self, method, params=None, session=None):
        """Sends a command and does not wait for its answer (from inside an
        event handler, e.g. to close a dialog that blocks the page)."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))

    def pump(self, seconds):
        """Reads events for a while (nothing to send)."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.ws.settimeout(left)
            try:
                data = json.loads(self.ws.recv())
            except websocket.WebSocketTimeoutException:
                return
            finally:
                self.ws.settimeout(60)
            if "method" in data:
                self.on_event(data)

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass


class Browser(Running):
    def __init__(self, artefacts):
        self.artefacts = artefacts
        os.makedirs(artefacts, exist_ok=True)
        root = os.path.join(BUILD, "tests", "browser-run")
        os.makedirs(root, exist_ok=True)
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=root)
        self.proc = None
        self.conn = None

    def start(self):
        args = [chromium_path(), "--headless=new", "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                "--user-data-dir=" + self.profile,
                "--no-first-run", "--no-default-browser-check", "--disable-gpu",
                "--disable-dev-shm-usage", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--disable-default-apps", "--metrics-recording-only", "--mute-audio",
                "--password-store=basic", "--use-mock-keychain", "--hide-scrollbars",
                "--font-render-hinting=none", "--window-size=1280,900", "about:blank"]
        if os.geteuid() == 0:
            # Chromium's sandbox refuses to run as root; the pages are our own.
            args.insert(1, "--no-sandbox")
        # Its own home too: what chromium keeps beside the profile (a
        # certificate store, caches) goes where the test removes it.
        env = dict(os.environ, HOME=self.profile, XDG_CONFIG_HOME=self.profile,
                   XDG_CACHE_HOME=self.profile)
        self.proc = spawn(args, env, os.path.join(self.artefacts, "chromium.log"))
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        end = time.monotonic() + 60
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None:
                die("chromium exited with %s; see %s/chromium.log"
                    % (self.proc.returncode, self.artefacts))
            if time.monotonic() > end:
                die("chromium: no DevToolsActivePort after 60 s")
            time.sleep(0.1)
        time.sleep(0.1)  # written in two steps; both lines are needed
        with open(port_file) as f:
            port, path = f.read().split("\n")[:2]
        self.conn = Connection("ws://127.0.0.1:%s%s" % (port.strip(), path.strip()), self._event)
        self.pages = {}

    def _event(self, msg):
        page = self.pages.get(msg.get("sessionId"))
        if page:
            page.event(msg["method"], msg.get("params", {}))

    def page(self):
        target = self.conn.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.conn.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        p = Page(self, session, target)
        self.pages[session] = p
        p.setup()
        return p

    def stop(self):
        if self.conn:
            try:
                self.conn.call("Browser.close", timeout=10)
            except Exception:
                pass
            self.conn.close()
            self.conn = None
        if self.proc:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
            self.proc = None
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser, session, target):
        self.b = browser
        self.session = session
        self.target = target
        self._problems = []
        self.dialogs = []
        self.allowed = []  # predicates(entry) for expected browser log errors
        self.width = 1280

    def call(self, method, params=None, timeout=60):
        return self.b.conn.call(method, params, session=self.session, timeout=timeout)

    def setup(self):
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")
        self.viewport(1280)

    # --- what went wrong -----------------------------------------------------

    def event(self, method, p):
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            ex = d.get("exception", {})
            self._problems.append("uncaught exception: %s %s" % (
                d.get("text", ""), ex.get("description", "")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = [a.get("value", a.get("description", "")) for a in p.get("args", [])]
            self._problems.append("console.%s: %s" % (p["type"], " ".join(map(str, args))))
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            if e.get("level") == "error" and not any(ok(e) for ok in self.allowed):
                self._problems.append("browser log (%s): %s %s" % (
                    e.get("source"), e.get("text"), e.get("url", "")))
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(p.get("message", ""))
            self._problems.append("JavaScript dialog opened: %s %r" % (p.get("type"), p.get("message")))
            # It blocks the page until answered; the answer is not awaited.
            self.b.conn.send("Page.handleJavaScriptDialog", {"accept": False}, self.session)

    def problems(self):
        return list(self._problems)

    # --- navigation and waiting -----------------------------------------------

    def goto(self, url):
        """Loads url as a new document (a URL that differs only in its
        fragment would otherwise be a same-document navigation, keeping
        the page, its focus and its state)."""
        self.call("Page.navigate", {"url": "about:blank"})
        self.wait_js("location.href === 'about:blank' && document.readyState === 'complete'")
        self.call("Page.navigate", {"url": url})
        self.wait_js("location.href === %s && document.readyState === 'complete'" % json.dumps(url))

    def eval(self, expr, await_promise=False):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": await_promise})
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError("evaluate %r: %s %s" % (expr[:80], d.get("text"),
                                                   d.get("exception", {}).get("description", "")))
        return r.get("result", {}).get("value")

    def wait_js(self, expr, timeout=30, what=None):
        """Waits until expr is truthy; returns its value, or raises."""
        end = time.monotonic() + timeout
        while True:
            v = self.eval("(function(){try{return (%s);}catch(e){return null;}})()" % expr)
            if v:
                return v
            if time.monotonic() > end:
                raise CDPError("waited %d s for %s" % (timeout, what or expr))
            self.b.conn.pump(0.1)

    def wait_for(self, selector, timeout=30):
        return self.wait_js("document.querySelector(%s) !== null" % json.dumps(selector),
                            timeout, "selector " + selector)

    def exists(self, selector):
        return self.eval("document.querySelector(%s) !== null" % json.dumps(selector))

    def text(self, selector):
        return self.eval("(function(){var e=document.querySelector(%s);return e?e.textContent:null;})()"
                         % json.dumps(selector))

    def texts(self, selector):
        return self.eval("Array.from(document.querySelectorAll(%s)).map(function(e){return e.textContent;})"
                         % json.dumps(selector))

    def count(self, selector):
        return self.eval("document.querySelectorAll(%s).length" % json.dumps(selector))

    def settle(self, seconds=0.3):
        self.b.conn.pump(seconds)

    # --- input, as a person would give it ---------------------------------------

    def click(self, selector):
        """A real mouse click at the element's centre (so a hidden or covered
        element is not clickable, as for a person)."""
        box = self.eval("""(function(){
            var e = document.querySelector(%s);
            if (!e) return null;
            e.scrollIntoView({block: 'center', inline: 'center'});
            var r = e.getBoundingClientRect();
            if (r.width === 0 || r.height === 0) return null;
            return [r.left + r.width / 2, r.top + r.height / 2];
        })()""" % json.dumps(selector))
        if not box:
            raise CDPError("click: %s is not there or not visible" % selector)
        x, y = box
        top = self.eval("(function(){var t=document.elementFromPoint(%f,%f);var e=document.querySelector(%s);"
                        "return !!t && (t===e || e.contains(t));})()" % (x, y, json.dumps(selector)))
        if not top:
            raise CDPError("click: %s is covered by another element" % selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y,
                                                   "button": "left", "clickCount": 1})
        self.settle(0.05)

    def focus(self, selector):
        self.eval("document.querySelector(%s).focus()" % json.dumps(selector))

    def type_into(self, selector, text, clear=True):
        self.focus(selector)
        if clear:
            self.eval("(function(e){e.select && e.select();})(document.querySelector(%s))"
                      % json.dumps(selector))
            self.press("Backspace")
        self.call("Input.insertText", {"text": text})

    KEYS = {"Enter": (13, "\r"), "Tab": (9, ""), "Escape": (27, ""), "Backspace": (8, ""),
            "Space": (32, " "), "ArrowDown": (40, "")}

    def press(self, key, shift=False):
        code, text = self.KEYS[key]
        base = {"key": " " if key == "Space" else key, "code": key,
                "windowsVirtualKeyCode": code, "modifiers": 8 if shift else 0}
        down = dict(base, type="keyDown")
        if text:
            down["text"] = text
        self.call("Input.dispatchKeyEvent", down)
        self.call("Input.dispatchKeyEvent", dict(base, type="keyUp"))
        self.settle(0.05)

    def active(self):
        """What has the keyboard focus: tag#id.class 'text'."""
        return self.eval("""(function(){var e=document.activeElement;if(!e)return '';
            return e.tagName.toLowerCase()+(e.id?'#'+e.id:'')+' '+(e.textContent||e.value||'').trim().slice(0,40);})()""")

    # --- screenshots ------------------------------------------------------------

    def viewport(self, width, height=900):
        self.width = width
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})

    def screenshot(self, name, full=True):
        """Saves <artefacts>/<name>-<width>.png (the whole page) and returns
        its path."""
        params = {"format": "png", "captureBeyondViewport": full}
        if full:
            m = self.call("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m.get("contentSize")
            params["clip"] = {"x": 0, "y": 0, "width": self.width,
                              "height": max(600, min(int(size["height"]), 6000)), "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        path = os.path.join(self.b.artefacts, "%s-%d.png" % (name, self.width))
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path
