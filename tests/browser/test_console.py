"""The operator console in a real Chromium (headless, Debian's package),
driven over the DevTools protocol against the real services and a real
PostgreSQL, as an operator would use it.

Data: completed sagas, a declined payment (Failed), one without stock
(Compensated), sagas of a second definition (stock-first: the stock, then
the payment; version 1 from SAGA_DEFINITIONS_DIR, version 2 registered
through the admin API), one completed and one compensated, dead letters (payment fails every command for a while and
the orchestrator gives up after 3 attempts; their sagas wait in
PendingPayment, one of them made to look stuck for 10 minutes), a dead
letter refused with 404 by the orchestrator, and values that hold markup:
a customerId and an error text of the form <img src=x onerror=...>.

Then, in the browser: sign in (a wrong token first) with the keyboard
alone; the keyboard reaches every section with a visible focus; the
delivery health per service and peer matches the outbox tables; the saga
list's counts match the table, each saga's definition and version are
shown, a state chip filters, a customer filter finds the compensated saga,
pages of 4 walk forward and back; the definition select (filled from the
definitions) keeps one definition's sagas; the Definitions page draws each
definition's versions as their lines of steps; the compensated saga's
timeline shows exactly its saga_history (forward and compensation told
apart), its steps as its definition has them, each marked with what it
did, its payment and reservation, its raw JSON, and survives a reload of
its deep link; a stock-first saga's page follows its own definition (its
steps, its states, its messages under them, its input and outputs); the stuck saga is found with "stuck for more than 5
minutes", cancelled with a reason after a confirmation, and the page
(auto-refresh on) shows it reach Compensated with cause Cancelled; in the
dead letters, one is retried alone, then a selection of two, then the
rest of its group together (each confirmation says how many), the group
empties and its sagas complete; with inventory stopped, the deliveries page names it and shows the
rest; sign out. Throughout: no uncaught exception, no console error,
no CSP violation, no JavaScript dialog (the markup probes would open one).

Screenshots of each page at 1280 and 390 px wide are kept in
<build>/tests/browser-artefacts/ for a person to look at.
"""

import json
import os
import sys
import time

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
from sagatest import core
from sagatest import cdp

ADMIN_TOKEN = "browser-console-admin-token-%d" % os.getpid()
XSS = "<img src=x onerror=alert(1)>"
XSS_ERR = "<img src=x onerror=alert(2)>"
GHOST_MSG = "00000000-0000-4000-8000-00000000dead"
GHOST_SAGA = "00000000-0000-4000-8000-000000000404"
DEAD = 6  # sagas whose PayCommand dies: retried 1, then 2 selected, then a group of 3
STATES = ("PendingPayment", "PendingInventory", "Compensating", "Completed", "Failed",
          "Compensated")
WIDTHS = (1280, 390)
STOCK_FIRST = {
    "name": "stock-first", "version": 1,
    "input": {"customerId": {"type": "id"}, "itemId": {"type": "id"},
              "qty": {"type": "integer", "min": 1, "max": 10},
              "amount": {"type": "integer", "min": 1, "max": 100000000},
              "note": {"type": "string", "maxLength": 40}},
    "steps": [
        {"name": "Stock", "participant": "inventory", "command": "ReserveInventoryCommand",
         "fields": ["itemId", "qty"], "succeeded": "InventoryReserved",
         "failed": "InventoryReservationFailed", "compensation": "ReleaseInventoryCommand",
         "compensated": "InventoryReleased"},
        {"name": "Charge", "participant": "payment", "command": "PayCommand",
         "fields": ["customerId", "amount"], "succeeded": "PaymentSucceeded",
         "failed": "PaymentFailed", "compensation": "RefundPaymentCommand",
         "compensated": "PaymentRefunded"}]}
# version 2: the same steps, the payment with its own deadline
STOCK_FIRST_2 = dict(STOCK_FIRST, version=2, steps=[
    STOCK_FIRST["steps"][0], dict(STOCK_FIRST["steps"][1], deadlineMs=90000)])
ARTEFACTS = os.path.join(core.BUILD, "tests", "browser-artefacts")

c = core.Checks("browser-console")


def services_env(defs_dir):
    common = {"ADMIN_TOKEN": ADMIN_TOKEN}
    orch = dict(common, RETRY_MAX_ATTEMPTS="3", RETRY_BASE_MS="20", RETRY_CAP_MS="100",
                BREAKER_OPEN_MS="300", STEP_TIMEOUT_MS="600000", SAGA_DEFINITIONS_DIR=defs_dir)
    return {"orchestrator": orch, "payment": dict(common), "inventory": dict(common)}


def faults(s, rate):
    r = core.request(s.ports["payment"], "POST", "/admin/faults",
                     {"failRate": rate, "delayMs": 0, "dropResponseRate": 0}, s.internal())
    if r.status != 200:
        core.die("POST /admin/faults: %r" % r)


def start_stock_first(s, key, body):
    r = core.request(s.ports["orchestrator"], "POST", "/sagas/stock-first", body,
                     {"Idempotency-Key": key})
    if r.status != 201:
        core.die("POST /sagas/stock-first: %r" % r)
    return r.json()["sagaId"]


def make_data(s, ctx):
    """Sagas in every terminal state, of two definitions, dead letters, and
    markup in data."""
    s.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 1000), "
           "('B002', 50), ('Z999', 0) ON CONFLICT (item_id) DO UPDATE SET available = excluded.available")
    s.psql("INSERT INTO payment.accounts (customer_id, balance, starting_balance) VALUES ('poor', 10, 10)")
    for i in range(6):
        r = s.order("ok-%d" % i, customer="c-%d" % (i % 3 + 1), item="A001" if i % 2 else "B002",
                    qty=i % 3 + 1, amount=1200 + 100 * i)
        if r.status != 201:
            core.die("POST /orders: %r" % r)
    s.order("comp-1", customer="c-9", item="Z999")
    s.order("fail-1", customer="poor")
    # stock-first: version 1 from SAGA_DEFINITIONS_DIR, version 2 through
    # the admin API; the sagas started before version 2 run version 1
    ctx["sf-done"] = start_stock_first(s, "sf-1", {"customerId": "c-2", "itemId": "A001",
                                                   "qty": 2, "amount": 900, "note": "gift wrap"})
    ctx["sf-comp"] = start_stock_first(s, "sf-2", {"customerId": "poor", "itemId": "B002",
                                                   "qty": 1, "amount": 500, "note": ""})
    if not s.wait_terminal(60):
        core.die("the first sagas did not finish")
    r = core.request(s.ports["orchestrator"], "POST", "/admin/api/definitions", STOCK_FIRST_2,
                     {"Authorization": "Bearer " + ADMIN_TOKEN})
    if r.status != 201:
        core.die("POST /admin/api/definitions: %r" % r)
    # what a step's succeeded event may carry, kept with the saga
    s.psql("UPDATE orchestrator.saga_instances SET outputs = '{\"Stock\": {\"shelf\": \"B-4\","
           " \"units\": 2}}' WHERE saga_id = '%s'" % ctx["sf-done"])
    # Dead letters: payment answers 500 to everything until the
    # orchestrator has given up on three PayCommands.
    faults(s, 1.0)
    for i in range(DEAD):
        s.order("dl-%d" % i, customer="dl-%d" % i)
    if not s.wait_sql("SELECT count(*) FROM orchestrator.outbox_messages WHERE dead_at IS NOT NULL",
                      str(DEAD), 60):
        core.die("no dead letters")
    faults(s, 0.0)
    # One of them looks stuck: nothing happened to it for 10 minutes.
    s.psql("UPDATE orchestrator.saga_instances SET updated_at = now() - interval '10 minutes' "
           "WHERE customer_id = 'dl-1'")
    # A dead letter of another service, refused at once: an event for a
    # saga that does not exist (404), its error text holding markup.
    s.psql("INSERT INTO payment.outbox_messages (message_id, kind, destination, type, payload) "
           "VALUES ('%s', 'event', 'orchestrator', 'PaymentSucceeded', "
           "'{\"eventId\": \"%s\", \"sagaId\": \"%s\"}')" % (GHOST_MSG, GHOST_MSG, GHOST_SAGA))
    if not s.wait_sql("SELECT count(*) FROM payment.outbox_messages WHERE dead_at IS NOT NULL",
                      "1", 60):
        core.die("the 404 did not make a dead letter")
    s.psql("UPDATE payment.outbox_messages SET last_error = last_error || ' %s' "
           "WHERE message_id = '%s'" % (XSS_ERR, GHOST_MSG))
    # Markup where an operator reads it: a customer id.
    s.psql("UPDATE orchestrator.saga_instances SET customer_id = '%s' WHERE saga_id = "
           "(SELECT saga_id FROM orchestrator.saga_instances WHERE state = 'Completed' "
           "ORDER BY created_at LIMIT 1)" % XSS)


def no_markup_ran(p, where):
    """The probes stay text: no <img> element anywhere, and the page never
    saw a dialog (alert(1) would open one)."""
    c.ok(p.count("img:not([src='favicon.svg'])") == 0, "%s: no <img> from data in the page" % where)
    c.ok(not p.dialogs, "%s: no JavaScript dialog opened: %r" % (where, p.dialogs))


def shots(p, name, full=True):
    """The page at each width (the whole page, or what the screen shows:
    a modal dialog covers the screen only)."""
    if full:  # no passing toast or focus ring over the picture
        p.eval("document.getElementById('toast').classList.remove('show');"
               "document.activeElement && document.activeElement.blur()")
    for w in WIDTHS:
        p.viewport(w)
        p.eval("window.scrollTo(0, 0)")
        p.settle(0.4)
        p.screenshot(name, full)
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
    c.ok(p.eval("document.getElementById('autorefresh').checked") is False,
         "auto-refresh is off by default")
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
    c.ok(navs == ["sagas", "definitions", "dead-letters", "deliveries"],
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
    want = [("orchestrator", "payment"), ("orchestrator", "inventory"),
            ("payment", "orchestrator"), ("inventory", "orchestrator")]
    c.ok(sorted(got) == sorted(want), "one row per service and peer: %r" % sorted(got))
    for svc, dest in sorted(got):
        dead = s.scalar("SELECT count(*) FROM %s.outbox_messages WHERE destination = '%s' "
                        "AND dead_at IS NOT NULL" % (svc, dest))
        c.ok(got[(svc, dest)]["dead"] == dead,
             "%s -> %s: the page shows %s dead, the table holds %s"
             % (svc, dest, got[(svc, dest)]["dead"], dead))
        c.ok(got[(svc, dest)]["breaker"] in ("closed", "open", "half-open"),
             "%s -> %s: a breaker state: %r" % (svc, dest, got[(svc, dest)]["breaker"]))
    shots(p, "deliveries")


def table_ids(p):
    return p.eval("Array.from(document.querySelectorAll('#saga-table tbody tr'))"
                  ".map(function(r){return r.dataset.sagaId;})")


def wait_view(p, hash_):
    """Waits until the page shown is the one of hash_, its data loaded (not
    the page before it, whose rows may still be there for a moment)."""
    p.wait_js("!!document.querySelector('main > [data-loaded=%s]')" % json.dumps(hash_),
              what="the page " + hash_)


def wait_list(p, hash_):
    """Opens the saga list at hash_ and waits for it."""
    p.eval("location.hash = %s" % json.dumps(hash_))
    wait_view(p, hash_)


def saga_list(p, s, ctx):
    wait_list(p, "#/sagas")
    counts = p.eval("""(function(){var o={};document.querySelectorAll('.chip').forEach(function(c){
        o[c.dataset.state]=c.querySelector('.count').textContent;});return o;})()""")
    db = dict(s.psql("SELECT state, count(*) FROM orchestrator.saga_instances GROUP BY state"))
    for st in STATES:
        c.ok(counts.get(st) == db.get(st, "0"), "chip %s shows %r, the table holds %r"
             % (st, counts.get(st), db.get(st, "0")))
    total = s.scalar("SELECT count(*) FROM orchestrator.saga_instances")
    c.ok(counts.get("all") == total, "chip All shows %r of %s" % (counts.get("all"), total))
    ids = table_ids(p)
    newest = s.psql("SELECT saga_id FROM orchestrator.saga_instances "
                    "ORDER BY created_at DESC, saga_id DESC")
    c.ok(ids == [r[0] for r in newest], "the list is every saga, newest first")
    # Each saga's definition and version.
    shown = p.eval("Array.from(document.querySelectorAll('#saga-table tbody tr')).map("
                   "function(r){return [r.dataset.sagaId, r.querySelector('td.def').textContent];})")
    want = dict(s.psql("SELECT saga_id, definition_name || ' v' || definition_version "
                       "FROM orchestrator.saga_instances"))
    c.ok(len(shown) == len(want) and all(want.get(i) == t for i, t in shown),
         "each row shows its saga's definition and version: %r" % shown[:3])
    c.ok(sorted(set(t for _, t in shown)) == ["order v1", "stock-first v1"],
         "two definitions in the list: %r" % sorted(set(t for _, t in shown)))
    # The markup in a customer id is shown as its characters.
    cust = p.texts("#saga-table td.cust")
    c.ok(XSS in cust, "the customer id %r is shown as text: %r" % (XSS, cust[-3:]))
    shots(p, "sagas")

    # A state chip filters.
    p.click('a.chip[data-state="Compensated"]')
    p.wait_js("location.hash.indexOf('state=Compensated') >= 0 && "
              "document.querySelector('a.chip[data-state=Compensated]').getAttribute('aria-current') === 'true'"
              " && Array.from(document.querySelectorAll('#saga-table .badge')).every("
              "function(b){return b.textContent === 'Compensated';})", what="the Compensated chip")
    c.ok(len(table_ids(p)) == int(db.get("Compensated", "0")), "the chip keeps the Compensated sagas")

    # The customer filter finds the compensated saga of c-9.
    wait_list(p, "#/sagas")
    p.type_into("#f-customerId", "c-9")
    p.press("Enter")
    p.wait_js("location.hash.indexOf('customerId=c-9') >= 0 && "
              "document.querySelectorAll('#saga-table tbody tr').length === 1", what="c-9's saga")
    ids = table_ids(p)
    want = s.scalar("SELECT saga_id FROM orchestrator.saga_instances WHERE customer_id = 'c-9'")
    c.ok(ids == [want], "the customer filter finds c-9's saga: %r" % ids)
    ctx["compensated"] = want

    # Pages of 4, newest first, forward and back.
    wait_list(p, "#/sagas?limit=4")
    pages = [table_ids(p)]
    while p.exists("#page-next") and len(pages) < 10:
        p.click("#page-next")
        p.wait_js("document.querySelector('.pager .muted').textContent.indexOf('Page %d ') === 0"
                  % (len(pages) + 1), what="page %d" % (len(pages) + 1))
        pages.append(table_ids(p))
    flat = [i for pg in pages for i in pg]
    c.ok(flat == [r[0] for r in newest], "pages of 4 hold every saga once, newest first: %d pages"
         % len(pages))
    c.ok(all(len(pg) == 4 for pg in pages[:-1]), "each page but the last holds 4")
    p.click("#page-prev")
    p.wait_js("document.querySelector('.pager .muted').textContent.indexOf('Page %d ') === 0"
              % (len(pages) - 1), what="the page before")
    c.ok(table_ids(p) == pages[-2], "Newer goes back one page")


def definition_filter(p, s):
    """The definition select holds the definitions registered, and keeps
    the sagas of the one chosen."""
    wait_list(p, "#/sagas")
    p.wait_js("document.getElementById('f-definition').dataset.loaded === 'true'",
              what="the definitions in the select")
    opts = p.eval("Array.from(document.querySelectorAll('#f-definition option'))"
                  ".map(function(o){return o.value;})")
    c.ok(opts == ["", "order", "stock-first"], "the select offers every definition: %r" % opts)
    p.eval("var e = document.getElementById('f-definition'); e.value = 'stock-first';"
           "e.dispatchEvent(new Event('change'))")
    wait_view(p, "#/sagas?definition=stock-first")
    want = [r[0] for r in s.psql("SELECT saga_id FROM orchestrator.saga_instances WHERE "
                                 "definition_name = 'stock-first' ORDER BY created_at DESC, saga_id DESC")]
    c.ok(table_ids(p) == want and len(want) == 2,
         "choosing stock-first keeps its sagas: %r, want %r" % (table_ids(p), want))
    c.ok(p.eval("document.getElementById('f-definition').value") == "stock-first",
         "the select shows the definition chosen")
    chips = p.eval("""(function(){var o={};document.querySelectorAll('.chip').forEach(function(c){
        o[c.dataset.state]=c.querySelector('.count').textContent;});return o;})()""")
    c.ok(chips.get("Completed") == "1" and chips.get("Compensated") == "1" and chips.get("all") == "2",
         "the counts are stock-first's: %r" % chips)
    c.ok("PendingPayment" not in chips, "the order saga's running states are left out: %r" % chips)
    shots(p, "sagas-stock-first")


def definitions_page(p, s):
    """Each definition, its versions newest first, each drawn as its steps."""
    p.click("[data-nav=definitions]")
    p.wait_for("#page-definitions[data-loaded] .def-card")
    names = p.eval("Array.from(document.querySelectorAll('.def-card')).map(function(e){return e.dataset.name;})")
    c.ok(names == ["order", "stock-first"], "one card per definition: %r" % names)

    def line(sel):
        return p.eval("""Array.from(document.querySelectorAll(%s)).map(function(li){
            return [li.dataset.step, li.querySelector('.def-participant').textContent,
                    li.querySelector('.def-command').textContent,
                    li.querySelector('.def-compensation').textContent];})""" % json.dumps(sel))
    for name, version in (("order", 1), ("stock-first", 2)):
        doc = json.loads(s.scalar("SELECT definition FROM orchestrator.saga_definitions WHERE "
                                  "name = '%s' AND version = %d" % (name, version)))
        want = [[st["name"], st["participant"], st["command"], st["compensation"]]
                for st in doc["steps"]]
        got = line("#def-%s .def-version.latest[data-version='%d'] .def-step" % (name, version))
        c.ok(got == want, "%s version %d is drawn as its steps:\n%r\n%r" % (name, version, got, want))
    # the older version, folded away, unfolds to its own steps
    older = "#def-stock-first details.def-version[data-version='1']"
    c.ok(p.exists(older) and not p.eval("document.querySelector(%s).open" % json.dumps(older)),
         "stock-first's version 1 is there, folded")
    p.click(older + " summary")
    c.ok([r[0] for r in line(older + " .def-step")] == ["Stock", "Charge"], "version 1's steps")
    c.ok("deadline" in p.text("#def-stock-first .def-version.latest .def-step[data-step=Charge] .def-meta"),
         "version 2's deadline is shown")
    shots(p, "definitions")


def step_marks(p):
    return p.eval("Array.from(document.querySelectorAll('#saga-steps .def-step')).map("
                  "function(li){return [li.dataset.step, li.dataset.status];})")


def msgs_under(p, state):
    """The message types drawn under the timeline's rows that enter state."""
    return p.eval("""Array.from(document.querySelectorAll('#timeline .step')).filter(function(li){
        return li.querySelector('.step-to').textContent === %s;}).map(function(li){
        return Array.from(li.querySelectorAll('.msg .type')).map(function(t){return t.textContent;});
        }).reduce(function(a, b){return a.concat(b);}, [])""" % json.dumps(state))


def other_saga(p, s, ctx):
    """A stock-first saga's page follows its own definition."""
    sid = ctx["sf-comp"]
    wait_list(p, "#/sagas?definition=stock-first")
    p.click('#saga-table tr[data-saga-id="%s"] a' % sid)
    p.wait_js("location.hash === '#/sagas/%s' && document.querySelectorAll('#saga-steps .def-step').length > 0"
              % sid, what="the stock-first saga's page")
    check_timeline(p, s, sid, "Compensated")
    c.ok(p.text("#page-saga .def-label") == "stock-first v1", "the page names its definition: %r"
         % p.text("#page-saga .def-label"))
    c.ok(step_marks(p) == [["Stock", "undone"], ["Charge", "failed"]],
         "its steps in its definition's order, with what each did: %r" % step_marks(p))
    for state, types in (("PendingStock", {"ReserveInventoryCommand", "InventoryReserved"}),
                         ("PendingCharge", {"PayCommand", "PaymentFailed"}),
                         ("Compensating", {"ReleaseInventoryCommand", "InventoryReleased"})):
        got = set(msgs_under(p, state))
        c.ok(types <= got, "the messages of %s are drawn under it: %r" % (state, got))
    c.ok(not p.exists("#timeline .others"), "no message is left aside")
    inp = p.texts("#saga-input dt")
    c.ok(sorted(inp) == sorted(["customerId", "itemId", "qty", "amount", "note", "Created", "Updated"]),
         "its input's fields: %r" % inp)
    shots(p, "saga-stock-first")
    # the completed one: both steps done, and what its step output
    sid = ctx["sf-done"]
    p.eval("location.hash = '#/sagas/%s'" % sid)
    wait_view(p, "#/sagas/" + sid)
    c.ok(step_marks(p) == [["Stock", "done"], ["Charge", "done"]], "both steps done: %r" % step_marks(p))
    outs = p.text("#saga-outputs")
    c.ok("Stock" in outs and "B-4" in outs, "its outputs are shown: %r" % outs)
    c.ok("gift wrap" in p.text("#saga-input"), "its input's values are shown")
    shots(p, "saga-stock-first-completed")


def saga_page(p, s, ctx, base):
    sid = ctx["compensated"]
    wait_list(p, "#/sagas?customerId=c-9")
    p.click('#saga-table tr[data-saga-id="%s"] a' % sid)
    p.wait_js("location.hash === '#/sagas/%s' && document.querySelectorAll('#timeline .step').length > 0" % sid,
              what="the timeline")
    check_timeline(p, s, sid, "Compensated")
    c.ok(step_marks(p) == [["Payment", "undone"], ["Inventory", "failed"]],
         "the order saga's steps, with what each did: %r" % step_marks(p))
    c.ok(p.text("#page-saga .def-label") == "order v1", "the page names its definition")
    c.ok(p.text("#page-saga .saga-id") == sid, "the page names the saga")
    c.ok(not p.exists("#cancel-saga"), "a finished saga offers no Cancel")
    kv = p.eval("""(function(){var o={};document.querySelectorAll('.side .card').forEach(function(card){
        var t={};card.querySelectorAll('tr').forEach(function(r){t[r.querySelector('th').textContent]=r.querySelector('td').textContent;});
        o[card.querySelector('h2').textContent]=t;});return o;})()""")
    pay = kv.get("Payment", {})
    res = kv.get("Reservation", {})
    c.ok(pay.get("status") == s.scalar("SELECT status FROM payment.payments WHERE saga_id = '%s'" % sid),
         "the payment row is shown: %r" % pay)
    c.ok(res.get("status") == s.scalar("SELECT status FROM inventory.reservations WHERE saga_id = '%s'" % sid),
         "the reservation row is shown: %r" % res)
    types = p.texts("#timeline .msg .type")
    for t in ("PayCommand", "PaymentSucceeded", "ReserveInventoryCommand",
              "InventoryReservationFailed", "RefundPaymentCommand", "PaymentRefunded"):
        c.ok(t in types, "the timeline shows the message %s" % t)
    shots(p, "saga")
    p.click("details.raw summary")
    raw = json.loads(p.text("#raw-json"))
    c.ok(raw.get("sagaId") == sid and raw.get("state") == "Compensated", "the raw JSON is the saga")
    # The deep link works on its own, in a new page load.
    p.goto(base + "#/sagas/" + sid)
    p.wait_js("document.querySelectorAll('#timeline .step').length > 0", what="the deep link")
    c.ok(p.text("#page-saga .saga-id") == sid, "the deep link opens the saga")


def check_timeline(p, s, sid, state):
    """The steps drawn are saga_history's rows, in order, each told apart
    as forward or compensation."""
    shown = p.eval("""Array.from(document.querySelectorAll('#timeline .step')).map(function(li){
        var f = li.querySelector('.step-from');
        return [li.dataset.version, f.classList.contains('none') ? '' : f.textContent,
                li.querySelector('.step-to').textContent, li.querySelector('.step-cause').textContent,
                li.dataset.kind];})""")
    hist = s.psql("SELECT version, coalesce(from_state, ''), to_state, cause FROM "
                  "orchestrator.saga_history WHERE saga_id = '%s' ORDER BY version" % sid)
    c.ok([r[:4] for r in shown] == hist, "the timeline of %s is its saga_history:\n%r\n%r"
         % (sid, shown, hist))
    for v, _, to, cause, kind in shown:
        comp = to in ("Compensating", "Compensated") or cause in ("Cancelled", "StepTimeout")
        c.ok((kind == "compensation") == comp, "v%s (%s, %s) is drawn as %s" % (v, to, cause, kind))
    c.ok(p.text("#page-saga .page-head .badge") == state, "the saga is shown %s" % state)


def cancel(p, s, ctx):
    wait_list(p, "#/sagas")
    p.type_into("#f-stuck", "5")
    p.press("Enter")
    p.wait_js("location.hash.indexOf('stuck=5') >= 0 && "
              "document.querySelectorAll('#saga-table tbody tr').length === 1", what="the stuck saga")
    sid = s.scalar("SELECT saga_id FROM orchestrator.saga_instances WHERE customer_id = 'dl-1'")
    c.ok(table_ids(p) == [sid], "stuck for more than 5 minutes finds the one stuck saga")
    p.click('#saga-table tr[data-saga-id="%s"] a' % sid)
    p.wait_for("#cancel-saga")
    p.click("#cancel-saga")
    p.wait_for("dialog[open] #dlg-field")
    shots(p, "cancel-dialog", full=False)
    # Nothing happens without a reason, nor on "Keep saga".
    p.click("dialog[open] button[type=submit]")
    c.ok(p.text("dialog[open] .dlg-error") == "Please give a reason.", "a reason is required")
    p.press("Escape")
    p.wait_js("!document.querySelector('dialog[open]')", what="the dialog to close")
    c.ok(s.scalar("SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%s'" % sid)
         == "PendingPayment", "Escape cancels nothing")
    # Now with the keyboard: Enter on the button, the reason, Enter.
    p.focus("#cancel-saga")
    p.press("Enter")
    p.wait_js("document.activeElement && document.activeElement.id === 'dlg-field'",
              what="the reason field to have the focus")
    p.call("Input.insertText", {"text": "customer called: <b>stop</b>"})
    p.press("Enter")
    # The page follows by itself: auto-refresh on.
    p.click("label.switch")
    c.ok(p.eval("document.getElementById('autorefresh').checked"), "auto-refresh switches on")
    p.wait_js("document.querySelector('#page-saga .page-head .badge').textContent === 'Compensated'",
              timeout=60, what="the cancelled saga to reach Compensated on screen")
    c.ok(s.scalar("SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%s'" % sid)
         == "Compensated", "the cancelled saga is Compensated in the table")
    c.ok(s.scalar("SELECT count(*) FROM orchestrator.saga_history WHERE saga_id = '%s' "
                  "AND cause = 'Cancelled'" % sid) == "1", "saga_history has one Cancelled")
    check_timeline(p, s, sid, "Compensated")
    c.ok("<b>stop</b>" in (p.text("#cancellation") or ""), "the reason is shown, as text")
    # Auto-refresh reads again by itself: the top bar's time moves on.
    before = p.text("#updated")
    p.wait_js("document.getElementById('updated').textContent !== %s" % json.dumps(before),
              timeout=30, what="an automatic refresh")
    p.click("label.switch")
    c.ok(not p.eval("document.getElementById('autorefresh').checked"), "auto-refresh switches off")
    shots(p, "saga-cancelled")
    ctx["cancelled"] = sid


def group_count(p, service, type_):
    return p.eval("(function(){var g=document.querySelector('.group[data-service=%s][data-type=%s]');"
                  "return g ? Number(g.dataset.count) : 0;})()" % (service, type_))


def dead_letters(p, s, ctx):
    p.eval("location.hash = '#/dead-letters'")
    p.wait_for(".group[data-service=orchestrator][data-type=PayCommand]")
    c.ok(group_count(p, "orchestrator", "PayCommand") == DEAD, "%d PayCommands in one group" % DEAD)
    c.ok(group_count(p, "payment", "PaymentSucceeded") == 1, "the payment service's 404 is listed")
    errs = p.texts(".group[data-service=payment] pre.err")
    c.ok(any(XSS_ERR in e for e in errs), "the error text %r is shown as text: %r" % (XSS_ERR, errs))
    # Its saga does not exist: following the link says so.
    p.click(".group[data-service=payment] .group-toggle")
    p.click('.group[data-service=payment] a[href="#/sagas/%s"]' % GHOST_SAGA)
    p.wait_js("!!document.querySelector('#page-saga .notice.error')", what="the missing saga")
    c.ok("No saga with this id" in p.text("#page-saga .notice.error"),
         "a saga that does not exist is said so: %r" % p.text("#page-saga .notice.error"))
    p.eval("location.hash = '#/dead-letters'")
    p.wait_for(".group[data-service=orchestrator][data-type=PayCommand]")
    sel = ".group[data-service=orchestrator][data-type=PayCommand]"
    p.click(sel + " .group-toggle")
    p.wait_for(sel + " tbody tr")
    shots(p, "dead-letters")
    # One message alone.
    one = p.eval("document.querySelector('%s tbody tr').dataset.messageId" % sel)
    p.click('%s tr[data-message-id="%s"] .retry-one' % (sel, one))
    p.wait_for("dialog[open]")
    c.ok(p.text("dialog[open] h2") == "Retry 1 dead letter?", "the confirmation says 1: %r"
         % p.text("dialog[open] h2"))
    p.click("dialog[open] button[type=submit]")
    p.wait_js("document.querySelectorAll('%s tbody tr').length === %d" % (sel, DEAD - 1),
              what="one fewer")
    c.ok(one not in p.eval("Array.from(document.querySelectorAll('%s tbody tr'))"
                           ".map(function(r){return r.dataset.messageId;})" % sel),
         "the retried one is gone from the list")
    # A selection: pick three, change one's mind about one, retry two.
    boxes = sel + " tbody tr:nth-child(%d) input[type=checkbox]"
    for i in (1, 2, 3):
        p.click(boxes % i)
    c.ok(p.text(sel + " .retry-selected") == "Retry selected (3)", "the selection is counted")
    p.click(boxes % 3)
    c.ok(p.text(sel + " .retry-selected") == "Retry selected (2)", "and uncounted")
    picked = p.eval("Array.from(document.querySelectorAll('%s tbody tr')).filter(function(r){"
                    "return r.querySelector('input').checked;}).map(function(r){"
                    "return r.dataset.messageId;})" % sel)
    p.click(sel + " .retry-selected")
    p.wait_for("dialog[open]")
    c.ok(p.text("dialog[open] h2") == "Retry 2 dead letters?", "the confirmation says 2: %r"
         % p.text("dialog[open] h2"))
    p.click("dialog[open] button[type=submit]")
    p.wait_js("document.querySelectorAll('%s tbody tr').length === %d" % (sel, DEAD - 3),
              what="the selection to go")
    left = p.eval("Array.from(document.querySelectorAll('%s tbody tr'))"
                  ".map(function(r){return r.dataset.messageId;})" % sel)
    c.ok(not set(picked) & set(left), "the selected ones are gone, the others stay")
    # The rest of the group.
    p.click(sel + " .retry-group")
    p.wait_for("dialog[open]")
    c.ok(p.text("dialog[open] h2") == "Retry %d dead letters?" % (DEAD - 3),
         "the confirmation says %d: %r" % (DEAD - 3, p.text("dialog[open] h2")))
    shots(p, "retry-dialog", full=False)
    p.click("dialog[open] button[type=submit]")
    p.wait_js("!document.querySelector('%s')" % sel, timeout=30, what="the group to go")
    c.ok(s.scalar("SELECT count(*) FROM orchestrator.outbox_messages WHERE dead_at IS NOT NULL") == "0",
         "no dead letter left in the orchestrator")
    c.ok(group_count(p, "payment", "PaymentSucceeded") == 1, "the other group stays")
    # Delivered again: the sagas not cancelled complete; the cancelled
    # one's late payment is declined (voided) and it stays Compensated.
    c.ok(s.wait_sql("SELECT count(*) FROM orchestrator.saga_instances WHERE customer_id LIKE "
                    "'dl-%' AND customer_id <> 'dl-1' AND state = 'Completed'", str(DEAD - 1), 60),
         "the retried sagas complete")
    c.ok(s.wait_sql("SELECT status FROM payment.payments WHERE saga_id = '%s'" % ctx["cancelled"],
                    "voided", 30), "the cancelled saga's late payment is voided")
    c.ok(s.scalar("SELECT state FROM orchestrator.saga_instances WHERE saga_id = '%s'"
                  % ctx["cancelled"]) == "Compensated", "the cancelled saga stays Compensated")


def partial(p, s):
    """A peer that does not answer: the page says which, and shows the rest."""
    s.stop_service("inventory")
    p.eval("location.hash = '#/deliveries'")
    p.wait_js("!!document.querySelector('#page-deliveries .notice.warn')", what="the partial notice")
    c.ok("inventory" in p.text("#page-deliveries .notice.warn"),
         "the notice names inventory: %r" % p.text("#page-deliveries .notice.warn"))
    rows = p.eval("Array.from(document.querySelectorAll('#delivery-table tbody tr'))"
                  ".map(function(r){return r.dataset.service;})")
    c.ok("orchestrator" in rows and "inventory" not in rows,
         "the others' rows are still shown: %r" % rows)
    shots(p, "deliveries-partial")


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
    """The errors the browser logs for answers the test asks for: the 401s
    of asking whether a session exists before sign-in and of the wrong
    token, and the 404 of the saga that does not exist."""
    url, text = entry.get("url", ""), entry.get("text", "")
    return entry.get("source") == "network" and (
        (url.endswith("/admin/session") and "401" in text) or
        (url.endswith("/admin/api/sagas/" + GHOST_SAGA) and "404" in text))


def main():
    core.need_tool("psql", "postgresql")
    os.makedirs(ARTEFACTS, exist_ok=True)
    for old in os.listdir(ARTEFACTS):  # this run's pictures only
        if old.endswith(".png"):
            os.remove(os.path.join(ARTEFACTS, old))
    defs_dir = core.tmpdir("browser-defs-")
    with open(os.path.join(defs_dir, "stock-first.json"), "w") as f:
        json.dump(STOCK_FIRST, f)
    os.chmod(defs_dir, 0o755)
    ctx = {}
    with core.System("browser", env=services_env(defs_dir)) as s:
        t0 = time.monotonic()
        make_data(s, ctx)
        print("data made in %.1f s" % (time.monotonic() - t0), flush=True)
        base = "http://127.0.0.1:%d/console/" % s.ports["orchestrator"]
        with cdp.Browser(ARTEFACTS) as b:
            p = b.page()
            p.allowed.append(expected_log)
            steps = [("sign in", lambda: sign_in(p, base)),
                     ("keyboard", lambda: keyboard(p, base)),
                     ("deliveries", lambda: deliveries(p, s)),
                     ("saga list", lambda: saga_list(p, s, ctx)),
                     ("definition filter", lambda: definition_filter(p, s)),
                     ("definitions", lambda: definitions_page(p, s)),
                     ("saga page", lambda: saga_page(p, s, ctx, base)),
                     ("other definition's saga", lambda: other_saga(p, s, ctx)),
                     ("cancel", lambda: cancel(p, s, ctx)),
                     ("dead letters", lambda: dead_letters(p, s, ctx)),
                     ("partial answer", lambda: partial(p, s)),
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
