#!/bin/bash
# Entry point of the postgres container under docker-compose.tls.yml: TLS
# only, then the image's own entry point. Runs as root (the image's entry
# point drops to the postgres user itself).
#
# The server's certificate, key and CA come mounted under /run/secrets, with
# the host's owner and mode; PostgreSQL wants its key owned by itself and
# 0600, so the three are copied into a directory of the postgres user. The
# server then runs with ssl = on (TLS 1.2 or later) and a pg_hba with, apart
# from the container's own Unix socket, hostssl lines only: a connection
# without TLS (sslmode=disable) is refused ("no pg_hba.conf entry ... no
# encryption"). The settings are given on the command line, so they hold for
# a data volume made before TLS was turned on, too.
set -euo pipefail

src=/run/secrets
dst=/run/pgsaga-tls
install -d -o postgres -g postgres -m 0700 "$dst"
install -o postgres -g postgres -m 0644 "$src/ca.crt" "$dst/ca.crt"
install -o postgres -g postgres -m 0644 "$src/postgres.crt" "$dst/server.crt"
install -o postgres -g postgres -m 0600 "$src/postgres.key" "$dst/server.key"
install -o postgres -g postgres -m 0600 /dev/stdin "$dst/pg_hba.conf" <<-'HBA'
	# written by docker/postgres-tls.sh at every start
	# the container's own socket: the init scripts, `docker compose exec postgres psql`
	local   all  all       trust
	hostssl all  all  all  scram-sha-256
HBA

if [[ ${1:-} == postgres ]]; then
	set -- "$@" -c ssl=on -c ssl_min_protocol_version=TLSv1.2 \
		-c ssl_cert_file="$dst/server.crt" -c ssl_key_file="$dst/server.key" \
		-c ssl_ca_file="$dst/ca.crt" -c hba_file="$dst/pg_hba.conf"
fi
exec docker-entrypoint.sh "$@"
