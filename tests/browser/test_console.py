"""The operator console in a real Chromium (headless, Debian's package),
driven over the DevTools protocol against the real services and a real
PostgreSQL, as an operator would use it.

Data: completed sagas, a declined payment (Failed), one without stock
(Compensated), dead letters (payment fails every command for a while and
the orchestrator gives up after 3 attempts), and values that hold
markup: a customerId and an error text of the form <img src=x onerror=...>.

Then, in the browser: sign in (a wrong token first) with the keyboard
alone; the keyboard reaches every section with a visible focus; the
delivery health per service and destination matches the outbox tables;
sign out. Throughout: no uncaught exception, no console error, no CSP
violation, no JavaScript dialog (the markup probes would open one).

Screenshots of each page at 1280 and 390 px wide are kept in
<build>/tests/browser-artefacts/ for a person to look at.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ops"))
sys.path.insert(0, HERE)
import opslib  # noqa: E402
import cdp  # noqa: E402

ADMIN_TOKEN = "browser-console-admin-token-%d" % os.getpid()
XSS = "<img src=x onerror=alert(1)>"
WIDTHS = (1280, 390)
ARTEFACTS = os.path.join(opslib.BUILD, "tests", "browser-artefacts")

c = opslib.Checks("browser-console")


def services_env():
    common = {"ADMIN_TOKEN": ADMIN_TOKEN}
    orch = dict(common, RETRY_MAX_ATTEMPTS="3", RETRY_BASE_MS="20", RETRY_CAP_MS="100",
                BREAKER_OPEN_MS="300", STEP_TIMEOUT_MS="600000")
    return {"orchestrator": orch, "payment": dict(common), "inventory": dict(common)}


def faults(s, rate):
    r = opslib.request(s.ports["payment"], "POST", "/admin/faults",
                       {"failRate": rate, "delayMs": 0, "dropResponseRate": 0}, s.internal())
    if r.status != 200:
        opslib.die("POST /admin/faults: %r" % r)


def make_data(s):
    """Sagas in every terminal state, dead letters, and markup in data."""
    s.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000), "
           "('B002', 50), ('Z999', 0) ON CONFLICT (item_id) DO UPDATE SET available = excluded.available")
    s.psql("INSERT INTO payment.accounts (customer_id, balance, starting_balance) VALUES ('poor', 10, 10)")
    for i in range(6):
        r = s.order("ok-%d" % i, customer="c-%d" % (i % 3 + 1), item="A001" if i % 2 else "B002",
                    qty=i % 3 + 1, amount=1200 + 100 * i)
        if r.status != 201:
            opslib.die("POST /orders: %r" % r)
    s.order("comp-1", customer="c-9", item="Z999")
    s.order("fail-1", customer="poor")
    if not s.wait_terminal(60):
        opslib.die("the first sagas did not finish")
    # Dead letters: payment answers 500 to everything until the
    # orchestrator has given up on three PayCommands.
    faults(s, 1.0)
    for i in range(3):
        s.order("dl-%d" % i, customer="dl-%d" % i)
    if not s.wait_sql("SELECT count(*) FROM orchestrator.outbox_messages WHERE dead_at IS NOT NULL",
                      "3", 60):
        opslib.die("no dead letters")
    faults(s, 0.0)
    # Markup where an operator reads it: a customer id and an error text.
    s.psql("UPDATE orchestrator.saga_instances SET customer_id = '%s' WHERE saga_id = "
           "(SELECT saga_id FROM orchestrator.saga_instances WHERE state = 'Completed' "
           "ORDER BY created_at LIMIT 1)" % XSS)


def no_markup_ran(p, where):
    """The probes stay text: no <img> element anywhere, and the page never
    saw a dialog (alert(1) would open one)."""
    c.ok(p.count("img:not([src='favicon.svg'])") == 0, "%s: no <img> from data in the page" % where)
    c.ok(not p.dialogs, "%s: no JavaScript dialog opened: %r" % (where, p.dialogs))


def shots(p, name):
    for w in WIDTHS:
        p.viewport(w)
        p.settle(0.3)
        p.screenshot(name)
        # Nothing wider than the screen: the page must not scroll sideways.
        over = p.eval("document.documentElement.scrollWidth - window.innerWidth")
        c.ok(over <= 0, "%s at %d px: the page is %d px wider than the screen" % (name, w, over))
    p.viewport(WIDTHS[0])
    p.settle(0.2)


def sign_in(p, base):
    """Signs in from a deep link, which survives the sign-in."""
    p.goto(base + "#/deliveries")
    p.wait_for("#signin #token")
    c.ok(p.eval("document.activeElement && document.activeElement.id") == "token",
         "the token field has the focus on arrival")
    c.ok(p.eval("document.getElementById('topbar').hidden"), "no navigation before sign-in")
    shots(p, "signin")
    # A wrong token, then the right one, with the keyboard alone.
    p.type_into("#token", "not-the-token-at-all")
    p.press("Enter")
    p.wait_js("document.getElementById('signin-error').textContent.length > 0", what="an error")
    c.ok("not right" in p.text("#signin-error"),
         "a wrong token says so: %r" % p.text("#signin-error"))
    p.type_into("#token", ADMIN_TOKEN)
    p.press("Enter")
    p.wait_js("!document.getElementById('topbar').hidden", what="the top bar after sign-in")
    p.wait_for("#page-deliveries")
    c.ok(p.count("#signin") == 0, "the sign-in form is gone after sign-in")
    cookies = p.call("Network.getCookies", {"urls": [base]})["cookies"]
    mine = [k for k in cookies if k["name"] == "pgsaga_admin"]
    c.ok(len(mine) == 1 and mine[0]["httpOnly"] and mine[0].get("sameSite") == "Strict",
         "the session cookie is HttpOnly and SameSite=Strict: %r" % mine)
    c.ok(p.eval("document.cookie.indexOf('pgsaga_admin') < 0"),
         "the session cookie is out of the page's reach")


def keyboard(p, base):
    """From the top of a freshly loaded page, Tab reaches the skip link,
    then the sections, each with a visible focus ring; Enter on one opens
    it."""
    p.goto(base + "#/nowhere")
    p.wait_js("!document.getElementById('topbar').hidden && !!document.querySelector('main h1')",
              what="a signed-in page")
    seen = []
    for _ in range(12):
        p.press("Tab")
        info = p.eval("""(function(){var e=document.activeElement; var s=getComputedStyle(e);
            return {text:(e.textContent||'').trim(), nav:e.dataset ? e.dataset.nav || '' : '',
                    ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0};})()""")
        seen.append(info)
        if info["nav"] == "deliveries":
            break
    c.ok(seen and seen[0]["text"] == "Skip to content", "Tab first reaches the skip link: %r" % seen[:1])
    navs = [s["nav"] for s in seen if s["nav"]]
    c.ok(navs == ["sagas", "dead-letters", "deliveries"],
         "Tab walks through the sections in order: %r" % navs)
    c.ok(all(s["ring"] for s in seen), "every focused element shows a focus ring: %r"
         % [s["text"] for s in seen if not s["ring"]])
    p.press("Enter")
    p.wait_for("#page-deliveries")
    c.ok(p.eval("location.hash") == "#/deliveries", "Enter on a focused section opens it")


def deliveries(p, s):
    p.wait_for("#delivery-table")
    c.ok(p.eval("document.querySelector('[data-nav=deliveries]').getAttribute('aria-current')") == "page",
         "the section shown is marked in the navigation")
    rows = p.eval("""Array.from(document.querySelectorAll('#delivery-table tbody tr')).map(function(r){
        var t = Array.from(r.cells).map(function(td){return td.textContent.trim();});
        return {service: r.dataset.service, destination: r.dataset.destination, pending: t[2],
                leased: t[3], dead: t[4], breaker: t[6]};})""")
    got = {(r["service"], r["destination"]): r for r in rows}
    want = [("orchestrator", "payment"), ("orchestrator", "inventory")]
    c.ok(set(want) <= set(got), "a row per peer of the orchestrator: %r" % sorted(got))
    for svc, dest in sorted(got):
        dead = s.scalar("SELECT count(*) FROM %s.outbox_messages WHERE destination = '%s' "
                        "AND dead_at IS NOT NULL" % (svc, dest))
        c.ok(got[(svc, dest)]["dead"] == dead,
             "%s -> %s: the page shows %s dead, the table holds %s"
             % (svc, dest, got[(svc, dest)]["dead"], dead))
        c.ok(got[(svc, dest)]["breaker"] in ("closed", "open", "half-open"),
             "%s -> %s: a breaker state: %r" % (svc, dest, got[(svc, dest)]["breaker"]))
    shots(p, "deliveries")


def sign_out(p, base):
    p.click("#signout")
    p.wait_for("#signin #token")
    c.ok(p.eval("document.getElementById('topbar').hidden"), "signed out: no navigation")
    # A reload stays signed out: the cookie is gone.
    p.goto(base)
    p.wait_for("#signin #token")
    cookies = p.call("Network.getCookies", {"urls": [base]})["cookies"]
    c.ok(not [k for k in cookies if k["name"] == "pgsaga_admin" and k["value"]],
         "the session cookie is cleared")


def expected_log(entry):
    """The 401s the console causes on purpose: asking whether a session
    exists before sign-in, and the wrong token."""
    return entry.get("source") == "network" and entry.get("url", "").endswith("/admin/session") \
        and "401" in entry.get("text", "")


def main():
    opslib.need_tool("psql", "postgresql")
    os.makedirs(ARTEFACTS, exist_ok=True)
    for old in os.listdir(ARTEFACTS):  # this run's pictures only
        if old.endswith(".png"):
            os.remove(os.path.join(ARTEFACTS, old))
    with opslib.System("browser", env=services_env()) as s:
        t0 = time.monotonic()
        make_data(s)
        print("data made in %.1f s" % (time.monotonic() - t0), flush=True)
        base = "http://127.0.0.1:%d/console/" % s.ports["orchestrator"]
        with cdp.Browser(ARTEFACTS) as b:
            p = b.page()
            p.allowed.append(expected_log)
            steps = [("sign in", lambda: sign_in(p, base)),
                     ("keyboard", lambda: keyboard(p, base)),
                     ("deliveries", lambda: deliveries(p, s)),
                     ("sign out", lambda: sign_out(p, base))]
            for name, step in steps:
                try:
                    step()
                except cdp.CDPError as e:
                    c.ok(False, "%s: %s" % (name, e))
                    p.screenshot("failed-" + name.replace(" ", "-"))
                    break
                no_markup_ran(p, name)
            problems = p.problems()
            c.ok(not problems, "no errors in the browser: %s" % json.dumps(problems, indent=1))
    print("screenshots in %s" % ARTEFACTS, flush=True)
    c.done()


if __name__ == "__main__":
    main()
