"""The three services and shipping, the participant made of SQL functions
(sql/shipping/shipping.sql run by saga-participant), on a private cluster,
over HTTP or through a private RabbitMQ node: what scripts/up runs, on free
ports (ShippingSystem). The orchestrator registers the definitions of a
directory (SAGA_DEFINITIONS_DIR) and serves the admin API (ADMIN_TOKEN).
"""

import os
import subprocess

from .core import SRC, System, binary, die, free_port, request, spawn

SHIPPING_SQL = os.path.join(SRC, "sql", "shipping", "shipping.sql")
DEMO_SEED = os.path.join(SRC, "sql", "demo-seed.sql")
DEFINITIONS = os.path.join(SRC, "src", "orchestrator", "definitions")
RABBIT = os.path.join(SRC, "scripts", "rabbit-node")
SHIPPING_ENV = {
    "PARTICIPANT_NAME": "shipping",
    "PARTICIPANT_COMMANDS": "ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)"
                            "/CancelShipmentCommand=cancel_shipment(ShipmentCancelled)",
}
# quick retries: a test waits for what a dead service or a broker left behind
FAST = {"RETRY_BASE_MS": "50", "RETRY_CAP_MS": "500", "RETRY_MAX_ATTEMPTS": "1000",
        "BREAKER_OPEN_MS": "200"}


class ShippingSystem(System):
    """System with a fourth service, "shipping" (saga-participant), on
    self.ports["shipping"]. transport: "http" or "amqp" (a private node under
    root/rabbit, started before the services and destroyed after them).
    definitions_dir: the orchestrator's SAGA_DEFINITIONS_DIR (default: the
    shipped src/orchestrator/definitions). env: service -> extra settings,
    "shipping" included. The demo stock (sql/demo-seed.sql) is loaded once
    inventory has made its table."""

    def __init__(self, name, transport="http", definitions_dir=None, env=None,
                 admin_token=None):
        super().__init__(name, env=env)
        self.transport = transport
        self.definitions_dir = definitions_dir or DEFINITIONS
        self.admin_token = admin_token or "sagas-admin-token-%d" % os.getpid()
        self.ports["shipping"] = free_port()
        self.amqp_url = None
        self.rabbit_dir = os.path.join(self.root, "rabbit")

    def start(self):
        if self.transport == "amqp":
            os.makedirs(self.root, exist_ok=True)
            r = subprocess.run(["bash", RABBIT, "start", self.rabbit_dir, str(free_port())],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                die("scripts/rabbit-node start failed:\n" + r.stderr[-2000:])
            self.amqp_url = r.stdout.strip()
        super().start()
        self.psql_file(DEMO_SEED)
        self.psql_file(SHIPPING_SQL)
        self.start_service("shipping")
        self.wait_ready("shipping")

    def stop(self):
        # the services, then the node, then the cluster, which removes root
        # and the node's directory with it (a node destroyed after that was
        # left running: CI found one)
        try:
            for s in list(self.procs):
                self.stop_service(s)
            if self.amqp_url:
                subprocess.run(["bash", RABBIT, "destroy", self.rabbit_dir],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            super().stop()

    def service_env(self, s):
        if s == "shipping":
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PG", "FAULT_", "PARTICIPANT_"))}
            env.update(SHIPPING_ENV)
            env.update({"DATABASE_URL": self.url("saga_shipping"),
                        "LISTEN_ADDR": "127.0.0.1:%d" % self.ports["shipping"],
                        "INTERNAL_TOKEN": self.token, "LOG_LEVEL": "info",
                        "ORCHESTRATOR_URL": "http://127.0.0.1:%d" % self.ports["orchestrator"]})
        else:
            env = super().service_env(s)
        env.update(FAST)
        env["ADMIN_TOKEN"] = self.admin_token
        if s == "orchestrator":
            env.update({"SAGA_DEFINITIONS_DIR": self.definitions_dir,
                        "SHIPPING_URL": "http://127.0.0.1:%d" % self.ports["shipping"]})
        if self.amqp_url:
            env.update({"TRANSPORT": "amqp", "AMQP_URL": self.amqp_url})
        else:
            env.pop("TRANSPORT", None)
            env.pop("AMQP_URL", None)
        env.update(self.extra_env.get(s, {}))
        return env

    def start_service(self, s):
        if s == "shipping":
            self.procs[s] = spawn([binary("participant")], self.service_env(s), self.log_path(s))
        else:
            super().start_service(s)

    # --- talking to it ------------------------------------------------------

    def admin(self):
        return {"Authorization": "Bearer " + self.admin_token}

    def start_saga(self, name, key, body):
        """POST /sagas/{name}."""
        return request(self.ports["orchestrator"], "POST", "/sagas/" + name, body,
                       {"Idempotency-Key": key})

    def saga(self, saga_id):
        """GET /sagas/{id}'s body, or None."""
        r = request(self.ports["orchestrator"], "GET", "/sagas/" + saga_id)
        return r.json() if r.status == 200 else None

    def faults(self, s, **faults):
        """POST /admin/faults on service s (failRate, delayMs, dropResponseRate)."""
        return request(self.ports[s], "POST", "/admin/faults", faults, self.internal())
