#!/usr/bin/python3
"""docs/openapi.yaml against the running services.

Starts a private cluster and the three real services, sends requests that
provoke every status code and every error code the document lists, and
checks each answer against the document: the status is documented for the
operation, the Content-Type is one of the documented media types, required
headers are there and match, and the JSON body validates against the
schema. A status or error code the document lists but no request provoked
fails the test, unless the document marks it x-pgsaga-unexercised (with
the reason). Request bodies are checked too: a body the service accepted
must validate against the documented request schema, and one it refused as
invalid must not.

Finally the database is stopped, for the 503 answers, and the container
health check script (docker/healthcheck.sh) must follow /readyz.
"""

import json
import os
import re
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
import yaml  # noqa: E402  (Debian: python3-yaml)

from sagatest import oaschema
from sagatest.core import (SRC, SERVICES, Checks, System, help_text, raw_request,
                           request)

DOC_PATH = os.path.join(SRC, "docs", "openapi.yaml")

checks = Checks("openapi")
doc = yaml.safe_load(open(DOC_PATH, encoding="utf-8"))

for e in oaschema.check_document(doc):
    checks.ok(False, "document: " + e)

# path template -> regex
TEMPLATES = []
for tpath in doc["paths"]:
    rx = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(tpath)) + "$"
    TEMPLATES.append((tpath, re.compile(rx)))


def default_port(service):
    out = help_text(service)
    m = re.search(r"LISTEN_ADDR .*\(default: '[^']*:(\d+)'\)", out)
    if not m:
        sys.exit("no LISTEN_ADDR default in saga-%s --help" % service)
    return int(m.group(1))


DEFAULT_PORT = {s: default_port(s) for s in SERVICES}

covered = set()          # (template, method, status)
covered_codes = set()    # (template, method, status, code)
covered_generic = set()  # components.responses names used for unknown paths/methods


def servers_of(tpath):
    servers = doc["paths"][tpath].get("servers") or doc.get("servers") or []
    ports = set()
    for s in servers:
        m = re.match(r"^https?://[^/:]+:(\d+)", s["url"])
        if m:
            ports.add(int(m.group(1)))
    return ports


def check_response(what, resp_doc, r):
    resp_doc = oaschema.deref(doc, resp_doc)
    content = resp_doc.get("content") or {}
    ctype = (r.header("content-type") or "").split(";")[0].strip()
    code = None
    if content:
        if not checks.ok(ctype in content, "%s: Content-Type %r not documented (%s)"
                         % (what, ctype, sorted(content))):
            return None
        schema = content[ctype].get("schema", {})
        if ctype == "application/json":
            try:
                body = r.json()
            except ValueError as e:
                checks.ok(False, "%s: body is not JSON (%s): %r" % (what, e, r.body[:200]))
                return None
            errs = oaschema.validate(doc, schema, body)
            checks.ok(not errs, "%s: body %s does not match the schema: %s"
                      % (what, json.dumps(body)[:300], "; ".join(errs)))
            if isinstance(body, dict) and isinstance(body.get("error"), dict):
                code = body["error"].get("code")
        else:
            checks.ok(oaschema.deref(doc, schema).get("type") == "string",
                      "%s: non-JSON media type %s needs a string schema" % (what, ctype))
    for hname, h in (resp_doc.get("headers") or {}).items():
        h = oaschema.deref(doc, h)
        val = r.header(hname)
        if val is None:
            checks.ok(not h.get("required"), "%s: required header %s missing" % (what, hname))
            continue
        errs = oaschema.validate(doc, h.get("schema", {}), val)
        checks.ok(not errs, "%s: header %s: %s" % (what, hname, "; ".join(errs)))
    return code


def request_schema(tpath, method, path):
    op = doc["paths"][tpath][method]
    if "requestBody" not in op:
        return None
    if tpath == "/commands/{type}":
        # the body's shape depends on the type: the schema of that name
        name = path.rsplit("/", 1)[1]
        return doc["components"]["schemas"].get(name)
    if tpath == "/sagas/{name}" and method == "post":
        # the input its definition declares: the order saga's is an OrderRequest
        if path.rsplit("/", 1)[1] == "order":
            return doc["components"]["schemas"]["OrderRequest"]
        return None
    return oaschema.deref(doc, op["requestBody"])["content"]["application/json"]["schema"]


def call(service, port, method, path, body=None, headers=None, raw=None, expect=None):
    """Sends one request and checks the answer against the document.
    raw: send these bytes instead (body and headers ignored). expect: the
    status this request is meant to provoke (a mismatch is a failure too,
    so that coverage is not reached by accident)."""
    if raw is not None:
        r = raw_request(port, raw)
    else:
        r = request(port, method, path, body, headers)
    what = "%s %s %s -> %s" % (service, method, path, r.status)
    if expect is not None:
        checks.ok(r.status == expect, "%s: expected %s (%r)" % (what, expect, r.body[:200]))
    bare = path.split("?")[0]
    tpath = next((t for t, rx in TEMPLATES if rx.match(bare)), None)
    m = method.lower()
    if tpath is None:
        covered_generic.add("UnknownPath")
        checks.ok(r.status == 404, "%s: unknown path should be 404" % what)
        check_response(what, doc["components"]["responses"]["UnknownPath"], r)
        return r
    if m not in doc["paths"][tpath]:
        covered_generic.add("MethodNotAllowed")
        checks.ok(r.status == 405, "%s: undocumented method should be 405" % what)
        check_response(what, doc["components"]["responses"]["MethodNotAllowed"], r)
        return r
    checks.ok(DEFAULT_PORT[service] in servers_of(tpath),
              "%s: the document does not list saga-%s (port %d) among the servers of %s"
              % (what, service, DEFAULT_PORT[service], tpath))
    responses = doc["paths"][tpath][m]["responses"]
    status = str(r.status)
    if not checks.ok(status in responses, "%s: status not documented for %s %s (%r)"
                     % (what, method, tpath, r.body[:200])):
        return r
    covered.add((tpath, m, status))
    code = check_response(what, responses[status], r)
    if code:
        covered_codes.add((tpath, m, status, code))
    # request bodies: accepted ones must match the documented schema,
    # refused-as-invalid ones must not
    schema = request_schema(tpath, m, bare)
    if schema is not None and body is not None and raw is None:
        errs = oaschema.validate(doc, schema, body if not isinstance(body, (str, bytes))
                                 else _maybe_json(body))
        if 200 <= r.status < 300:
            checks.ok(not errs, "%s: accepted body %r does not match the request schema: %s"
                      % (what, body, "; ".join(errs)))
        elif code in ("invalid_field", "invalid_json"):
            checks.ok(bool(errs), "%s: refused body %r matches the request schema"
                      % (what, body))
    return r


class _Unparsable:
    pass


def _maybe_json(s):
    try:
        return json.loads(s)
    except ValueError:
        return _Unparsable()


def new_id():
    return str(uuid.uuid4())


def check_coverage():
    for tpath, item in doc["paths"].items():
        for m in oaschema.HTTP_METHODS:
            if m not in item:
                continue
            for status, resp in item[m]["responses"].items():
                rdoc = oaschema.deref(doc, resp)
                skip = rdoc.get("x-pgsaga-unexercised") or resp.get("x-pgsaga-unexercised")
                if not skip:
                    checks.ok((tpath, m, status) in covered, "coverage: %s %s %s never answered"
                              % (m.upper(), tpath, status))
                    if (tpath, m, status) not in covered:
                        continue
                elif (tpath, m, status) not in covered:
                    print("not exercised: %s %s %s (%s)" % (m.upper(), tpath, status, skip))
                    continue
                schema = (rdoc.get("content") or {}).get("application/json", {}).get("schema")
                codes = oaschema.error_codes(doc, schema) if schema else None
                unexercised = dict(resp.get("x-pgsaga-unexercised-codes") or {})
                unexercised.update(rdoc.get("x-pgsaga-unexercised-codes") or {})
                for c in sorted(codes or ()):
                    if c in unexercised:
                        continue
                    checks.ok((tpath, m, status, c) in covered_codes,
                              "coverage: %s %s %s code %s never answered"
                              % (m.upper(), tpath, status, c))
    for name in ("UnknownPath", "MethodNotAllowed"):
        checks.ok(name in covered_generic, "coverage: components.responses.%s never answered"
                  % name)


ADMIN_TOKEN = "openapi-admin-token-0123456789"
ADMIN = {"Authorization": "Bearer " + ADMIN_TOKEN}


sy_state = {}


def demo_step(n):
    return {"name": n, "participant": "svc", "command": "Do" + n, "succeeded": n + "Done",
            "failed": n + "Failed", "compensation": "Undo" + n, "compensated": n + "Undone"}


DEMO1 = {"name": "oa-demo", "version": 1, "input": {"ref": {"type": "id"}},
         "steps": [demo_step("A")]}
DEMO2 = dict(DEMO1, version=2, steps=[demo_step("A"), demo_step("B")])


def admin_calls(o, port_of, tok):
    """The admin API and sign-in, while every service is up."""
    call("orchestrator", o, "GET", "/admin/session", expect=401)
    call("orchestrator", o, "POST", "/admin/session", {"token": "wrong-token-wrong"}, expect=401)
    call("orchestrator", o, "POST", "/admin/session", "{", expect=400)
    call("orchestrator", o, "POST", "/admin/session", {"token": 1}, expect=400)
    r = call("orchestrator", o, "POST", "/admin/session", {"token": ADMIN_TOKEN}, expect=200)
    cookie = {"Cookie": (r.header("Set-Cookie") or "").split(";")[0]}
    csrf = r.json().get("csrf", "") if r.status == 200 else ""
    call("orchestrator", o, "GET", "/admin/session", headers=cookie, expect=200)
    call("orchestrator", o, "POST", "/admin/session/logout", headers=cookie, expect=403)
    call("orchestrator", o, "POST", "/admin/session/logout", expect=401)
    for s, port in port_of.items():
        call(s, port, "GET", "/admin/api/deliveries", headers=ADMIN, expect=200)
        call(s, port, "GET", "/admin/api/deliveries", headers=tok, expect=401)
    call("orchestrator", o, "GET", "/admin/api/deliveries", headers=cookie, expect=200)

    # sagas: the list, one saga, cancel
    call("orchestrator", o, "GET", "/admin/api/sagas", headers=ADMIN, expect=200)
    r = call("orchestrator", o, "GET", "/admin/api/sagas?limit=1&state=Completed,Failed"
             "&since=2020-01-01T00:00:00Z", headers=ADMIN, expect=200)
    nxt = r.json().get("next") if r.status == 200 else None
    checks.ok(nxt is not None, "a first page of one has a next cursor: %r" % r)
    call("orchestrator", o, "GET", "/admin/api/sagas?limit=5&cursor=%s" % nxt, headers=ADMIN,
         expect=200)
    call("orchestrator", o, "GET", "/admin/api/sagas?limit=0", headers=ADMIN, expect=400)
    call("orchestrator", o, "GET", "/admin/api/sagas", expect=401)
    some = sy_state["completed"]
    r = call("orchestrator", o, "GET", "/admin/api/sagas/" + some, headers=ADMIN, expect=200)
    checks.ok(r.status == 200 and r.json().get("unavailable") == [], "all three answered: %r" % r)
    call("orchestrator", o, "GET", "/admin/api/sagas/nope", headers=ADMIN, expect=400)
    call("orchestrator", o, "GET", "/admin/api/sagas/" + new_id(), headers=ADMIN, expect=404)
    call("orchestrator", o, "GET", "/admin/api/sagas/" + some, headers=tok, expect=401)
    cancel = "/admin/api/sagas/%s/cancel"
    call("orchestrator", o, "POST", cancel % some, {"reason": "test"}, ADMIN, expect=409)
    call("orchestrator", o, "POST", cancel % new_id(), {"reason": "test"}, ADMIN, expect=404)
    call("orchestrator", o, "POST", cancel % some, {"reason": ""}, ADMIN, expect=400)
    call("orchestrator", o, "POST", cancel % some, "{", ADMIN, expect=400)
    call("orchestrator", o, "POST", cancel % "nope", {"reason": "x"}, ADMIN, expect=400)
    call("orchestrator", o, "GET", "/admin/api/sagas?stuckSeconds=0", headers=ADMIN, expect=200)
    call("orchestrator", o, "POST", cancel % some, {"reason": "x"}, cookie, expect=403)
    call("orchestrator", o, "POST", cancel % some, {"reason": "x"}, expect=401)
    # a saga waiting for payment (failing on purpose) is cancelled
    call("payment", port_of["payment"], "POST", "/admin/faults", {"failRate": 1}, tok, expect=200)
    r = call("orchestrator", o, "POST", "/orders",
             {"customerId": "c-5", "itemId": "A001", "qty": 1, "amount": 10},
             {"Idempotency-Key": "oa-cancel"}, expect=201)
    sid = r.json().get("sagaId") if r.status == 201 else new_id()
    r = call("orchestrator", o, "POST", cancel % sid, {"reason": "customer called"},
             dict(cookie, **{"X-Pgsaga-Csrf": csrf}), expect=200)
    checks.ok(r.status == 200 and r.json().get("cancelled") is True, "cancelled: %r" % r)
    call("payment", port_of["payment"], "POST", "/admin/faults", {"failRate": 0}, tok,
         expect=200)

    # saga definitions: register, read, migrate
    defs = "/admin/api/definitions"
    call("orchestrator", o, "POST", defs, DEMO1, ADMIN, expect=201)
    call("orchestrator", o, "POST", defs, DEMO1, ADMIN, expect=200)
    call("orchestrator", o, "POST", defs, dict(DEMO1, steps=[demo_step("B")]), ADMIN,
         expect=409)
    call("orchestrator", o, "POST", defs, dict(DEMO1, version=0), ADMIN, expect=400)
    call("orchestrator", o, "POST", defs, "{", ADMIN, expect=400)
    call("orchestrator", o, "POST", defs, DEMO2, cookie, expect=403)
    call("orchestrator", o, "POST", defs, DEMO2, expect=401)
    call("orchestrator", o, "POST", defs, DEMO2, ADMIN, expect=201)
    call("orchestrator", o, "GET", defs, headers=ADMIN, expect=200)
    call("orchestrator", o, "GET", defs, expect=401)
    call("orchestrator", o, "GET", defs + "/oa-demo/1", headers=ADMIN, expect=200)
    call("orchestrator", o, "GET", defs + "/oa-demo/9", headers=ADMIN, expect=404)
    call("orchestrator", o, "GET", defs + "/Oa-demo/1", headers=ADMIN, expect=400)
    call("orchestrator", o, "GET", defs + "/oa-demo/1", expect=401)
    migrate = defs + "/oa-demo/migrate"
    call("orchestrator", o, "POST", migrate, {"fromVersion": 1, "toVersion": 2}, ADMIN,
         expect=200)
    call("orchestrator", o, "POST", migrate, {"fromVersion": 1, "toVersion": 9}, ADMIN,
         expect=404)
    call("orchestrator", o, "POST", migrate, {"fromVersion": 1}, ADMIN, expect=400)
    call("orchestrator", o, "POST", migrate, "[", ADMIN, expect=400)
    call("orchestrator", o, "POST", migrate, {"fromVersion": 1, "toVersion": 2}, cookie,
         expect=403)
    call("orchestrator", o, "POST", migrate, {"fromVersion": 1, "toVersion": 2}, expect=401)

    # a saga of another definition in the list and in detail (written
    # straight into the table: oa-demo's participant does not exist)
    other = new_id()
    sy_state["psql"](
        "INSERT INTO orchestrator.saga_instances (saga_id, state, version, definition_name,"
        " definition_version, input, outputs) VALUES ('%s', 'PendingB', 2, 'oa-demo', 2,"
        " '{\"ref\": \"r-1\"}', '{\"A\": {\"receipt\": \"x-1\", \"n\": 3}}');"
        "INSERT INTO orchestrator.saga_history (saga_id, version, from_state, to_state, cause)"
        " VALUES ('%s', 1, NULL, 'PendingA', 'SagaStarted'),"
        " ('%s', 2, 'PendingA', 'PendingB', 'ADone')" % (other, other, other))
    r = call("orchestrator", o, "GET", "/admin/api/sagas?definition=oa-demo", headers=ADMIN,
             expect=200)
    got = r.json() if r.status == 200 else {}
    checks.ok([x.get("sagaId") for x in got.get("sagas", [])] == [other]
              and got["sagas"][0].get("definition") == {"name": "oa-demo", "version": 2}
              and got.get("counts", {}).get("PendingB") == 1,
              "definition=oa-demo lists its saga and counts its state: %r" % r)
    call("orchestrator", o, "GET", "/admin/api/sagas?state=PendingB,Completed", headers=ADMIN,
         expect=200)
    call("orchestrator", o, "GET", "/admin/api/sagas?definition=Oa", headers=ADMIN, expect=400)
    r = call("orchestrator", o, "GET", "/admin/api/sagas/" + other, headers=ADMIN, expect=200)
    checks.ok(r.status == 200 and r.json().get("input") == {"ref": "r-1"}
              and r.json().get("outputs", {}).get("A", {}).get("n") == 3,
              "the detail has the saga's input and outputs: %r" % r)

    # dead letters
    for s, port in port_of.items():
        call(s, port, "GET", "/admin/api/dead-letters", headers=ADMIN, expect=200)
        call(s, port, "POST", "/admin/api/dead-letters/retry",
             {"service": s, "messageIds": [new_id()]}, ADMIN, expect=200)
    call("orchestrator", o, "GET", "/admin/api/dead-letters?service=payment&type=PayCommand",
         headers=ADMIN, expect=200)
    call("orchestrator", o, "GET", "/admin/api/dead-letters?service=billing", headers=ADMIN,
         expect=400)
    call("orchestrator", o, "GET", "/admin/api/dead-letters", expect=401)
    call("orchestrator", o, "POST", "/admin/api/dead-letters/retry",
         {"service": "payment", "all": True}, ADMIN, expect=200)
    call("orchestrator", o, "POST", "/admin/api/dead-letters/retry",
         {"service": "billing", "all": True}, ADMIN, expect=400)
    call("orchestrator", o, "POST", "/admin/api/dead-letters/retry", "[]", ADMIN, expect=400)
    call("orchestrator", o, "POST", "/admin/api/dead-letters/retry",
         {"service": "orchestrator", "all": True}, cookie, expect=403)
    call("orchestrator", o, "POST", "/admin/api/dead-letters/retry",
         {"service": "orchestrator", "all": True}, expect=401)

    call("orchestrator", o, "POST", "/admin/session/logout",
         headers=dict(cookie, **{"X-Pgsaga-Csrf": csrf}), expect=200)
    return cookie


def admin_calls_db_down(port_of):
    for s, port in port_of.items():
        call(s, port, "GET", "/admin/api/deliveries", headers=ADMIN, expect=503)
        call(s, port, "GET", "/admin/api/dead-letters", headers=ADMIN, expect=503)
        call(s, port, "POST", "/admin/api/dead-letters/retry", {"service": s, "all": True},
             ADMIN, expect=503)
    o = port_of["orchestrator"]
    call("orchestrator", o, "GET", "/admin/api/sagas", headers=ADMIN, expect=503)
    call("orchestrator", o, "GET", "/admin/api/sagas/" + new_id(), headers=ADMIN, expect=503)
    call("orchestrator", o, "POST", "/admin/api/sagas/%s/cancel" % new_id(), {"reason": "x"},
         ADMIN, expect=503)
    defs = "/admin/api/definitions"
    call("orchestrator", o, "GET", defs, headers=ADMIN, expect=503)
    call("orchestrator", o, "POST", defs, dict(DEMO1, version=3), ADMIN, expect=503)
    call("orchestrator", o, "GET", defs + "/oa-demo/1", headers=ADMIN, expect=503)
    call("orchestrator", o, "POST", defs + "/oa-demo/migrate", {"fromVersion": 1, "toVersion": 2},
         ADMIN, expect=503)


def admin_wrong_tokens(o):
    """Wrong tokens are 401 each time and never lock the right one out."""
    for _ in range(12):
        call("orchestrator", o, "POST", "/admin/session", {"token": "guess-guess-guess"},
             expect=401)
    call("orchestrator", o, "POST", "/admin/session", {"token": ADMIN_TOKEN}, expect=200)


def too_large(path, token=None):
    auth = "Authorization: Bearer %s\r\n" % token if token else ""
    return ("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            "Idempotency-Key: big\r\nContent-Length: 70000\r\n\r\n{" % (path, auth)).encode()


def main():
    env = {
        "payment": {"PAYMENT_DEFAULT_CREDIT": "5000", "ADMIN_TOKEN": ADMIN_TOKEN},
        "inventory": {"ADMIN_TOKEN": ADMIN_TOKEN},
        # quick redelivery once payment stops failing on purpose
        "orchestrator": {"RETRY_BASE_MS": "50", "RETRY_CAP_MS": "300",
                         "BREAKER_OPEN_MS": "300", "RETRY_MAX_ATTEMPTS": "100000",
                         "ADMIN_TOKEN": ADMIN_TOKEN},
    }
    with System("openapi", env=env) as sy:
        o, p, i = (sy.ports[s] for s in SERVICES)
        port_of = {"orchestrator": o, "payment": p, "inventory": i}
        tok = sy.internal()
        bad_tok = {"Authorization": "Bearer not-the-token"}
        sy.psql("INSERT INTO inventory.stock (item_id, available) VALUES ('A001', 100), ('B002', 0)")

        # --- operations, on every service
        for s in SERVICES:
            for path in ("/healthz", "/readyz", "/metrics"):
                call(s, port_of[s], "GET", path, expect=200)
        call("orchestrator", o, "POST", "/healthz", body={}, expect=405)
        call("payment", p, "GET", "/no/such/endpoint", expect=404)

        # --- POST /orders
        body = {"customerId": "c-1", "itemId": "A001", "qty": 2, "amount": 1200}
        r = call("orchestrator", o, "POST", "/orders", body, {"Idempotency-Key": "oa-1"},
                 expect=201)
        s1 = r.json().get("sagaId") if r.status == 201 else None
        checks.ok(r.header("Location") == "/orders/%s" % s1, "Location of the new saga")
        same = '{ "amount": 1200, "qty": 2,\n "itemId": "A001", "customerId": "c-1" }'
        r = call("orchestrator", o, "POST", "/orders", same, {"Idempotency-Key": "oa-1"},
                 expect=201)
        checks.ok(r.header("Idempotent-Replayed") == "true" and r.status == 201
                  and r.json().get("duplicated") is True, "replay marked as such: %r" % r)
        call("orchestrator", o, "POST", "/orders", dict(body, qty=3),
             {"Idempotency-Key": "oa-1"}, expect=422)
        call("orchestrator", o, "POST", "/orders", body, expect=400)  # key missing
        call("orchestrator", o, "POST", "/orders", body, {"Idempotency-Key": "a b"}, expect=400)
        call("orchestrator", o, "POST", "/orders", body, {"Idempotency-Key": "k" * 256},
             expect=400)
        call("orchestrator", o, "POST", "/orders", '{"customerId": "c-1",}',
             {"Idempotency-Key": "oa-2"}, expect=400)
        call("orchestrator", o, "POST", "/orders", "[]", {"Idempotency-Key": "oa-3"}, expect=400)
        for n, bad in enumerate([dict(body, qty=0), dict(body, qty=1001),
                                 dict(body, amount=1.5), dict(body, customerId="no spaces"),
                                 {"customerId": "c-1", "itemId": "A001", "qty": 1}]):
            call("orchestrator", o, "POST", "/orders", bad, {"Idempotency-Key": "oa-bad-%d" % n},
                 expect=400)
        call("orchestrator", o, "POST", "/orders", raw=too_large("/orders"), expect=413)

        # a failed saga (declined: credit 5000) and a compensated one (no stock)
        r = call("orchestrator", o, "POST", "/orders", dict(body, amount=6000),
                 {"Idempotency-Key": "oa-failed"}, expect=201)
        s_failed = r.json().get("sagaId") if r.status == 201 else None
        r = call("orchestrator", o, "POST", "/orders", dict(body, itemId="B002", amount=100),
                 {"Idempotency-Key": "oa-compensated"}, expect=201)
        s_comp = r.json().get("sagaId") if r.status == 201 else None

        # --- POST /admin/faults, and a saga whose PayCommand fails meanwhile
        for s in ("payment", "inventory"):
            call(s, port_of[s], "POST", "/admin/faults", {"failRate": 0}, expect=401)
            call(s, port_of[s], "POST", "/admin/faults", {"failRate": 0}, bad_tok, expect=401)
        call("payment", p, "POST", "/admin/faults", "{failRate: 1}", tok, expect=400)
        call("payment", p, "POST", "/admin/faults", "[1]", tok, expect=400)
        call("payment", p, "POST", "/admin/faults", {"failRate": 2}, tok, expect=400)
        call("payment", p, "POST", "/admin/faults", {"delayMs": "10"}, tok, expect=400)
        call("inventory", i, "POST", "/admin/faults", raw=too_large("/admin/faults", sy.token),
             expect=413)
        call("inventory", i, "POST", "/admin/faults", {"delayMs": 0}, tok, expect=200)
        call("payment", p, "POST", "/admin/faults", {"failRate": 1}, tok, expect=200)
        pay = {"commandId": new_id(), "sagaId": new_id(), "customerId": "c-9", "amount": 10}
        call("payment", p, "POST", "/commands/PayCommand", pay, tok, expect=500)
        r = call("orchestrator", o, "POST", "/orders", dict(body, customerId="c-2"),
                 {"Idempotency-Key": "oa-applied"}, expect=201)
        s2 = r.json().get("sagaId") if r.status == 201 else new_id()
        # payment fails on purpose, so the saga waits in PendingPayment: an
        # event sent now is applied (the real PayCommand captures later and
        # its PaymentSucceeded is then ignored, so the saga stays consistent)
        ev = {"eventId": new_id(), "sagaId": s2}
        call("orchestrator", o, "POST", "/events/PaymentSucceeded", ev, tok, expect=200)
        r = call("orchestrator", o, "POST", "/events/PaymentSucceeded", ev, tok, expect=200)
        checks.ok(r.status == 200 and r.json() == {"duplicated": True},
                  "an event sent twice is a duplicate: %r" % r)
        call("payment", p, "POST", "/admin/faults", {"failRate": 0, "delayMs": 0,
                                                      "dropResponseRate": 0}, tok, expect=200)

        # --- POST /events/{type}
        call("orchestrator", o, "POST", "/events/PaymentSucceeded", ev, expect=401)
        call("orchestrator", o, "POST", "/events/PaymentSucceeded", ev, bad_tok, expect=401)
        call("orchestrator", o, "POST", "/events/NoSuchEvent", ev, tok, expect=404)
        call("orchestrator", o, "POST", "/events/StepTimeout", ev, tok, expect=404)
        call("orchestrator", o, "POST", "/events/PaymentFailed",
             {"eventId": new_id(), "sagaId": new_id(), "reason": "x"}, tok, expect=404)
        call("orchestrator", o, "POST", "/events/PaymentFailed", "{'eventId': 1}", tok,
             expect=400)
        call("orchestrator", o, "POST", "/events/PaymentFailed", "3", tok, expect=400)
        call("orchestrator", o, "POST", "/events/PaymentFailed", {"sagaId": s2}, tok,
             expect=400)
        call("orchestrator", o, "POST", "/events/PaymentFailed",
             {"eventId": new_id(), "sagaId": s2, "reason": "r" * 201}, tok, expect=400)
        call("orchestrator", o, "POST", "/events/InventoryReleased",
             raw=too_large("/events/InventoryReleased", sy.token), expect=413)

        # --- POST /commands/{type}
        for s, t in (("payment", "RefundPaymentCommand"), ("inventory", "ReleaseInventoryCommand")):
            c = {"commandId": new_id(), "sagaId": new_id()}
            call(s, port_of[s], "POST", "/commands/" + t, c, expect=401)
            call(s, port_of[s], "POST", "/commands/" + t, c, bad_tok, expect=401)
            call(s, port_of[s], "POST", "/commands/" + t, c, tok, expect=200)
            r = call(s, port_of[s], "POST", "/commands/" + t, c, tok, expect=200)
            checks.ok(r.status == 200 and r.json() == {"duplicated": True},
                      "%s sent twice is a duplicate: %r" % (t, r))
            call(s, port_of[s], "POST", "/commands/" + t, "{} x", tok, expect=400)
            call(s, port_of[s], "POST", "/commands/" + t, {"commandId": "nope", "sagaId": new_id()},
                 tok, expect=400)
            call(s, port_of[s], "POST", "/commands/NoSuchCommand", c, tok, expect=404)
            call(s, port_of[s], "POST", "/commands/" + t, raw=too_large("/commands/" + t, sy.token),
                 expect=413)
        call("payment", p, "POST", "/commands/ReserveInventoryCommand",
             {"commandId": new_id(), "sagaId": new_id(), "itemId": "A001", "qty": 1}, tok,
             expect=404)
        call("payment", p, "POST", "/commands/PayCommand", dict(pay, amount=0), tok, expect=400)
        call("inventory", i, "POST", "/commands/ReserveInventoryCommand",
             {"commandId": new_id(), "sagaId": new_id(), "itemId": "A001", "qty": 0}, tok,
             expect=400)
        call("inventory", i, "POST", "/commands/ReserveInventoryCommand",
             {"commandId": new_id(), "sagaId": new_id(), "itemId": "A001", "qty": 1.0}, tok,
             expect=400)

        # --- the sagas finish; their timelines validate
        checks.ok(sy.wait_terminal(30), "every saga reached a terminal state")
        states = {}
        for sid in (s1, s2, s_failed, s_comp):
            if not sid:
                continue
            r = call("orchestrator", o, "GET", "/orders/" + sid, expect=200)
            states[sid] = r.json().get("state") if r.status == 200 else None
        checks.ok(states.get(s1) == "Completed", "first saga Completed: %r" % states.get(s1))
        checks.ok(states.get(s2) == "Completed", "saga driven by a sent event Completed: %r"
                  % states.get(s2))
        checks.ok(states.get(s_failed) == "Failed", "declined saga Failed: %r"
                  % states.get(s_failed))
        checks.ok(states.get(s_comp) == "Compensated", "saga without stock Compensated: %r"
                  % states.get(s_comp))
        if s1:
            call("orchestrator", o, "GET", "/orders/" + s1.upper(), expect=200)
            # an event for a finished saga is ignored
            r = call("orchestrator", o, "POST", "/events/InventoryReserved",
                     {"eventId": new_id(), "sagaId": s1}, tok, expect=200)
            checks.ok(r.status == 200 and r.json().get("ignored") is True, "ignored: %r" % r)
        call("orchestrator", o, "GET", "/orders/not-a-uuid", expect=400)
        call("orchestrator", o, "GET", "/orders/" + new_id(), expect=404)

        # --- POST /sagas/{name}, GET /sagas/{id}: the order saga by its name
        r = call("orchestrator", o, "POST", "/sagas/order", dict(body, customerId="c-s"),
                 {"Idempotency-Key": "sa-1"}, expect=201)
        s_any = r.json().get("sagaId") if r.status == 201 else None
        checks.ok(r.status == 201 and r.header("Location") == "/sagas/%s" % s_any,
                  "Location of a saga started by name")
        call("orchestrator", o, "POST", "/sagas/order", dict(body, customerId="c-s"),
             {"Idempotency-Key": "sa-1"}, expect=201)
        call("orchestrator", o, "POST", "/sagas/order", dict(body, customerId="c-t"),
             {"Idempotency-Key": "sa-1"}, expect=422)
        call("orchestrator", o, "POST", "/sagas/order", dict(body, qty=0),
             {"Idempotency-Key": "sa-2"}, expect=400)
        call("orchestrator", o, "POST", "/sagas/order", body, expect=400)  # key missing
        call("orchestrator", o, "POST", "/sagas/order", body, {"Idempotency-Key": "a b"},
             expect=400)
        call("orchestrator", o, "POST", "/sagas/order", "[]", {"Idempotency-Key": "sa-4"},
             expect=400)
        call("orchestrator", o, "POST", "/sagas/no-such-saga", body,
             {"Idempotency-Key": "sa-3"}, expect=404)
        call("orchestrator", o, "POST", "/sagas/order", raw=too_large("/sagas/order"), expect=413)
        if s_any:
            call("orchestrator", o, "GET", "/sagas/" + s_any, expect=200)
        call("orchestrator", o, "GET", "/sagas/not-a-uuid", expect=400)
        call("orchestrator", o, "GET", "/sagas/" + new_id(), expect=404)

        # --- the admin API
        sy_state["completed"] = s1 or new_id()
        sy_state["psql"] = sy.psql
        admin_calls(o, port_of, tok)

        # --- the container health check follows /readyz
        hc = os.path.join(SRC, "docker", "healthcheck.sh")
        for s in SERVICES:
            rc = subprocess.run([hc], env={"LISTEN_ADDR": "0.0.0.0:%d" % port_of[s],
                                           "PATH": os.environ["PATH"]}).returncode
            checks.ok(rc == 0, "healthcheck.sh on ready saga-%s: exit %d" % (s, rc))

        # --- the database goes away: 503 with Retry-After
        sy.stop_database()
        for s in SERVICES:
            end = time.monotonic() + 15
            while time.monotonic() < end and request(port_of[s], "GET", "/readyz").status != 503:
                time.sleep(0.1)
            call(s, port_of[s], "GET", "/readyz", expect=503)
            rc = subprocess.run([hc, str(port_of[s])], stderr=subprocess.DEVNULL).returncode
            checks.ok(rc == 1, "healthcheck.sh on unready saga-%s: exit %d, want 1" % (s, rc))
        call("orchestrator", o, "POST", "/orders", body, {"Idempotency-Key": "oa-down"},
             expect=503)
        call("orchestrator", o, "GET", "/orders/" + (s1 or new_id()), expect=503)
        call("orchestrator", o, "POST", "/sagas/order", body, {"Idempotency-Key": "sa-down"},
             expect=503)
        call("orchestrator", o, "GET", "/sagas/" + (s1 or new_id()), expect=503)
        call("orchestrator", o, "POST", "/events/PaymentRefunded",
             {"eventId": new_id(), "sagaId": s2}, tok, expect=503)
        for s, t in (("payment", "RefundPaymentCommand"), ("inventory", "ReleaseInventoryCommand")):
            call(s, port_of[s], "POST", "/commands/" + t,
                 {"commandId": new_id(), "sagaId": new_id()}, tok, expect=503)
        admin_calls_db_down(port_of)
        for s in SERVICES:
            checks.ok(sy.procs[s].poll() is None, "saga-%s still runs without its database" % s)
        admin_wrong_tokens(o)

    check_coverage()
    checks.done()


if __name__ == "__main__":
    main()
