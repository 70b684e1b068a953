"""docs/operations.md, section RabbitMQ: every ```sh block runs as written,
in order, against a private node (scripts/rabbit-node, management plugin on),
and does what the text around it says.

The node gets the topology of docs/protocol.md, "RabbitMQ" for one service and a message refused
by its receiver (rejected without requeue, so dead-lettered into
pgsaga.dead), as a receiver would. The blocks run with bash from a scratch
directory holding `scripts` (a link to the repository's) and `.run/rabbit`
(the node), so `scripts/rabbit-node ctl .run/rabbit` means what it says;
only the management port 15673 is replaced by a free one, and the
placeholders of the one-message recipe by that message's values.
"""

import base64
import json
import os
import re
import subprocess
import time

from sagatest.core import SRC, Checks, die, free_port, need_tool, request, tmpdir

DOC = os.path.join(SRC, "docs", "operations.md")
NODE = os.path.join(SRC, "scripts", "rabbit-node")
AUTH = {"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}
MSG = {"message_id": "6d0c1c4e-0b7e-4c1e-9a55-3f1f0a7d2c11", "type": "PayCommand",
       "app_id": "orchestrator", "content_type": "application/json", "delivery_mode": 2}
PAYLOAD = '{"sagaId":"1f1c3383-9565-447f-a9f3-6c3d5685b0ad","amount":1200}'


def section_blocks():
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"^## RabbitMQ.*?(?=^## )", text, re.M | re.S)
    if not m:
        die("operations.md has no section RabbitMQ")
    return re.findall(r"^```sh\n(.*?)^```", m.group(0), re.M | re.S)


class Node:
    def __init__(self, work):
        self.work = work
        self.dir = os.path.join(work, ".run", "rabbit")
        self.port = free_port()
        self.mport = free_port()
        os.makedirs(self.dir)
        os.symlink(os.path.join(SRC, "scripts"), os.path.join(work, "scripts"))

    def start(self):
        env = dict(os.environ, RABBIT_MANAGEMENT_PORT=str(self.mport))
        r = subprocess.run(["bash", NODE, "start", self.dir, str(self.port)], env=env)
        if r.returncode != 0:
            die("scripts/rabbit-node start failed")
        # the management listener comes up with the node, but give it a moment
        for _ in range(100):
            if self.api("GET", "/api/overview").status == 200:
                return
            time.sleep(0.2)
        die("the management API did not answer")

    def destroy(self):
        subprocess.run(["bash", NODE, "destroy", self.dir])

    def api(self, method, path, body=None):
        return request(self.mport, method, path, body=body, headers=AUTH)

    def put(self, path, body):
        r = self.api("PUT", path, body)
        if r.status not in (201, 204):
            die("PUT %s: %r" % (path, r))

    def post(self, path, body):
        r = self.api("POST", path, body)
        if r.status not in (200, 201):
            die("POST %s: %r" % (path, r))
        return r.json() if r.body else None

    def topology(self):
        """docs/protocol.md, "RabbitMQ", for payment: what every service declares at start."""
        self.put("/api/exchanges/%2f/pgsaga", {"type": "direct", "durable": True})
        self.put("/api/exchanges/%2f/pgsaga.dead", {"type": "fanout", "durable": True})
        self.put("/api/queues/%2f/pgsaga.payment",
                 {"durable": True, "arguments": {"x-queue-type": "quorum",
                                                 "x-dead-letter-exchange": "pgsaga.dead"}})
        self.put("/api/queues/%2f/pgsaga.dead", {"durable": True})
        self.post("/api/bindings/%2f/e/pgsaga/q/pgsaga.payment", {"routing_key": "payment"})
        self.post("/api/bindings/%2f/e/pgsaga.dead/q/pgsaga.dead", {"routing_key": ""})

    def publish(self):
        r = self.post("/api/exchanges/%2f/pgsaga/publish",
                      {"routing_key": "payment", "properties": MSG, "payload": PAYLOAD,
                       "payload_encoding": "string"})
        if not r.get("routed"):
            die("the test message was not routed: %r" % r)

    def refuse(self):
        """What a receiver does with a message that can never succeed."""
        for _ in range(50):
            got = self.post("/api/queues/%2f/pgsaga.payment/get",
                            {"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"})
            if got:
                return
            time.sleep(0.1)
        die("pgsaga.payment stayed empty")

    def depth(self, queue):
        """Messages in queue, counted by taking them and putting them back
        (the queue's statistics lag by seconds)."""
        got = self.post("/api/queues/%2f/" + queue + "/get",
                        {"count": 100, "ackmode": "ack_requeue_true", "encoding": "auto"})
        return len(got)

    def wait_depth(self, queue, want, timeout=20):
        deadline = time.monotonic() + timeout
        n = self.depth(queue)
        while n != want and time.monotonic() < deadline:
            time.sleep(0.3)
            n = self.depth(queue)
        return n


def run(node, block):
    block = block.replace("15673", str(node.mport))
    block = block.replace("<the payload, as a JSON string>", PAYLOAD.replace('"', '\\"'))
    block = block.replace("<message_id>", MSG["message_id"])
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=node.work,
                       capture_output=True, text=True, timeout=120)
    print("$ " + block.strip().replace("\n", "\n  "))
    print(r.stdout.rstrip())
    if r.stderr.strip():
        print(r.stderr.rstrip())
    return r


def parse_json(out):
    try:
        return json.loads(out)
    except ValueError:
        return None


def main():
    need_tool("curl", "curl")
    ck = Checks("ops-rabbit")
    blocks = section_blocks()
    ck.ok(len(blocks) == 6, "the RabbitMQ section has 6 ```sh blocks (found %d)" % len(blocks))
    node = Node(tmpdir("rabbit-"))
    try:
        node.start()
        node.topology()
        node.publish()
        node.refuse()
        ck.ok(node.wait_depth("pgsaga.dead", 1) == 1, "the refused message is in pgsaga.dead")

        for b in blocks:
            r = run(node, b)
            ck.ok(r.returncode == 0, "block exits 0: %s" % b.split("\n")[0])
            if "list_queues name type" in b:
                ck.ok(re.search(r"^pgsaga\.dead\tclassic\t", r.stdout, re.M) is not None,
                      "list_queues shows pgsaga.dead")
                ck.ok(re.search(r"^pgsaga\.payment\tquorum\t", r.stdout, re.M) is not None,
                      "list_queues shows pgsaga.payment as a quorum queue")
            elif "list_connections" in b:
                ck.ok("no alarms" in r.stdout, "rabbitmq-diagnostics alarms reports none")
            elif "ack_requeue_true" in b:
                got = parse_json(r.stdout) or []
                ck.ok(len(got) == 1, "the get shows the one dead message")
                if got:
                    p = got[0].get("properties", {})
                    death = (p.get("headers", {}).get("x-death") or [{}])[0]
                    ck.ok(p.get("message_id") == MSG["message_id"], "with its message_id")
                    ck.ok(got[0].get("routing_key") == "payment", "and its routing key")
                    ck.ok(death.get("queue") == "pgsaga.payment"
                          and death.get("reason") == "rejected",
                          "and x-death naming the queue that refused it")
                    ck.ok(got[0].get("payload") == PAYLOAD, "and its payload")
                ck.ok(node.wait_depth("pgsaga.dead", 1) == 1, "reading leaves it there")
            elif "set_parameter shovel" in b:
                ck.ok(node.wait_depth("pgsaga.dead", 0) == 0, "the shovel empties pgsaga.dead")
                ck.ok(node.wait_depth("pgsaga.payment", 1) == 1,
                      "and puts the message back into pgsaga.payment")
                node.refuse()
                ck.ok(node.wait_depth("pgsaga.dead", 1) == 1, "refused again, for the next one")
            elif "ack_requeue_false" in b:
                got = parse_json(r.stdout) or []
                ck.ok(len(got) == 1 and got[0]["properties"].get("message_id") == MSG["message_id"],
                      "the one-message get takes the message")
                ck.ok(node.wait_depth("pgsaga.dead", 0) == 0, "and pgsaga.dead is empty")
            elif "/publish" in b:
                ck.ok((parse_json(r.stdout) or {}).get("routed") is True, "publish says routed")
                got = node.post("/api/queues/%2f/pgsaga.payment/get",
                                {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"})
                ck.ok(len(got) == 1 and got[0]["payload"] == PAYLOAD
                      and got[0]["properties"].get("message_id") == MSG["message_id"]
                      and got[0]["properties"].get("type") == MSG["type"],
                      "the message is back in pgsaga.payment, as it was")
            else:
                ck.ok(False, "a ```sh block this test does not know: %s" % b.split("\n")[0])
    finally:
        node.destroy()
    ck.done()


if __name__ == "__main__":
    main()
