#!/bin/bash
# Entry point of the rabbitmq container under docker-compose.tls.yml: AMQP
# over TLS only, then the image's own entry point. Runs as root (the image's
# entry point drops to the rabbitmq user itself).
#
# The broker's certificate, key and CA come mounted under /run/secrets, with
# the host's owner and mode; they are copied into a directory of the
# rabbitmq user, key 0600. Then a configuration file that sorts after the
# image's own (conf.d/10-defaults.conf) sets, as scripts/rabbit-node --tls
# does on one host:
# - listeners.tcp = none: no plain-text AMQP listener at all (5672 refuses
#   connections), and an AMQP-over-TLS one on 5671, TLS 1.2 or 1.3;
# - verify_peer and fail_if_no_peer_cert: a client must present a
#   certificate signed by the CA (the services present their own,
#   TLS_CERT_FILE); it then logs in with its user and password as before;
# - the management plugin's HTTP listener on the container's loopback only
#   (rabbitmqadmin inside the container still works; nothing on the network
#   speaks plain HTTP).
# Erlang distribution (the CLI tools' link to the node) stays inside the
# container. The file is written at every start, so it holds for a data
# volume made before TLS was turned on, too.
set -euo pipefail

src=/run/secrets
dst=/etc/rabbitmq/tls
install -d -o rabbitmq -g rabbitmq -m 0700 "$dst"
install -o rabbitmq -g rabbitmq -m 0644 "$src/ca.crt" "$dst/ca.crt"
install -o rabbitmq -g rabbitmq -m 0644 "$src/rabbitmq.crt" "$dst/server.crt"
install -o rabbitmq -g rabbitmq -m 0600 "$src/rabbitmq.key" "$dst/server.key"
install -d -o rabbitmq -g rabbitmq -m 0755 /etc/rabbitmq/conf.d
install -o rabbitmq -g rabbitmq -m 0644 /dev/stdin /etc/rabbitmq/conf.d/90-pgsaga-tls.conf <<-CONF
	# written by docker/rabbitmq-tls.sh at every start
	listeners.tcp = none
	listeners.ssl.default = 5671
	ssl_options.cacertfile = $dst/ca.crt
	ssl_options.certfile = $dst/server.crt
	ssl_options.keyfile = $dst/server.key
	ssl_options.verify = verify_peer
	ssl_options.fail_if_no_peer_cert = true
	ssl_options.versions.1 = tlsv1.3
	ssl_options.versions.2 = tlsv1.2
	management.tcp.ip = 127.0.0.1
CONF

exec docker-entrypoint.sh "$@"
