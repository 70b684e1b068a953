#!/usr/bin/env python3
"""broken_participant: a small participant, standard library only, that
the conformance kit (scripts/conformance) must find fault with.

    broken_participant.py --listen HOST:PORT --definition FILE --step NAME
                          [--no-inbox] [--no-voiding]

It runs one step of a saga definition: its command is answered with the
step's succeeded event, its compensation with the compensated event. It
takes INTERNAL_TOKEN and ORCHESTRATOR_URL from the environment, as pgsaga's
own participants do, keeps its state in memory and delivers its events to
ORCHESTRATOR_URL/events/{Type} from a queue, retrying 5xx and connection
errors with exponential backoff. Without a flag it meets the whole contract
(docs/participants.md), so the kit passes it; each flag breaks one rule:

  --no-inbox     commands are not remembered by commandId: a command
                 delivered twice runs twice and answers twice
  --no-voiding   a compensation before its command leaves no mark: the late
                 command succeeds
"""

import argparse
import http.client
import http.server
import json
import os
import queue
import random
import sys
import threading
import time
import urllib.parse
import uuid


def is_uuid(v):
    try:
        return isinstance(v, str) and len(v) == 36 and str(uuid.UUID(v)) == v.lower()
    except ValueError:
        return False


class Participant:
    def __init__(self, step, inbox, voiding, token, orchestrator):
        self.step = step
        self.fields = [f.split(".")[-1] for f in step.get("fields", [])]
        self.inbox_on = inbox
        self.voiding = voiding
        self.token = token
        self.orchestrator = urllib.parse.urlsplit(orchestrator)
        self.lock = threading.Lock()   # the "transaction": inbox, effect and event together
        self.inbox = set()             # commandIds handled
        self.state = {}                # sagaId -> "done", "voided" or "compensated"
        self.outbox = queue.Queue()

    def handle(self, ctype, body):
        """A well-formed message; (status, answer)."""
        cid, sid = body["commandId"].lower(), body["sagaId"].lower()
        with self.lock:
            if self.inbox_on and cid in self.inbox:
                return 200, {"duplicated": True}
            self.inbox.add(cid)
            state = self.state.get(sid)
            if ctype == self.step["command"]:
                if state in ("voided", "compensated"):
                    event = (self.step["failed"], {"reason": "voided"})
                else:
                    self.state[sid] = "done"
                    event = (self.step["succeeded"], {})
            else:
                if state is None and self.voiding:
                    self.state[sid] = "voided"
                elif state == "done":
                    self.state[sid] = "compensated"
                event = (self.step["compensated"], {})
            payload = dict(event[1], eventId=str(uuid.uuid4()), sagaId=sid)
            self.outbox.put((event[0], payload))
        return 200, {"duplicated": False}

    def deliver_forever(self):
        while True:
            etype, payload = self.outbox.get()
            delay = 0.05
            while not self.post_event(etype, payload):
                time.sleep(random.uniform(0, delay))
                delay = min(delay * 2, 0.5)

    def post_event(self, etype, payload):
        """True when delivered or refused for good (a 4xx other than 408
        and 429: a dead letter)."""
        u = self.orchestrator
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
        try:
            conn.request("POST", u.path.rstrip("/") + "/events/" + etype, body=json.dumps(payload),
                         headers={"Content-Type": "application/json",
                                  "Authorization": "Bearer " + self.token})
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()
        if 200 <= status < 300:
            return True
        if status >= 500 or status in (408, 429):
            return False
        print("broken_participant: %s dead: %d" % (etype, status), file=sys.stderr, flush=True)
        return True


def serve(participant, addr):
    p = participant

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass  # the client left without its answer: what was done stays done

        def error(self, status, code, message):
            self.answer(status, {"error": {"code": code, "message": message}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n > 0 else b""
            if self.headers.get("Authorization") != "Bearer " + p.token:
                return self.error(401, "unauthorized", "missing or wrong bearer token")
            ctype = self.path[len("/commands/"):] if self.path.startswith("/commands/") else None
            if ctype is None:
                return self.error(404, "not_found", "no such path")
            if ctype not in (p.step["command"], p.step["compensation"]):
                return self.error(404, "unknown_type", "unknown command type")
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                return self.error(400, "invalid_json", str(e))
            if not isinstance(body, dict):
                return self.error(400, "invalid_json", "the body must be a JSON object")
            needed = ["commandId", "sagaId"] + (p.fields if ctype == p.step["command"] else [])
            for key in needed:
                v = body.get(key)
                if v is None or (key in ("commandId", "sagaId") and not is_uuid(v)):
                    return self.error(400, "invalid_field", "%s is missing or invalid" % key)
            self.answer(*p.handle(ctype, body))

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    host, _, port = addr.rpartition(":")
    Server((host, int(port)), Handler).serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--definition", required=True)
    ap.add_argument("--step", required=True)
    ap.add_argument("--no-inbox", action="store_true")
    ap.add_argument("--no-voiding", action="store_true")
    args = ap.parse_args()
    with open(args.definition, encoding="utf-8") as f:
        steps = {s["name"]: s for s in json.load(f)["steps"]}
    p = Participant(steps[args.step], not args.no_inbox, not args.no_voiding,
                    os.environ["INTERNAL_TOKEN"], os.environ["ORCHESTRATOR_URL"])
    threading.Thread(target=p.deliver_forever, daemon=True).start()
    serve(p, args.listen)


if __name__ == "__main__":
    main()
