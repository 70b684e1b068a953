#!/bin/bash
# saga-healthcheck [PORT]: exit 0 when this container's service answers
# GET /readyz with 200, else 1 (2 for a usage error).
#
# The runtime image (debian:bookworm-slim) has no curl or wget, and adding
# them would pull in a dozen libraries for one request; bash can open a TCP
# connection itself (/dev/tcp), which is all one HTTP/1.0 GET needs.
# The port comes from the argument, else from LISTEN_ADDR (host:port); a
# wildcard host (0.0.0.0, [::], empty) is asked on the loopback address.

addr=${LISTEN_ADDR:-}
port=${1:-${addr##*:}}
host=${addr%:*}
host=${host#[}
host=${host%]}
case $host in
'' | 0.0.0.0 | '::' | '*') host=127.0.0.1 ;;
esac
if [[ $# -gt 0 || -z $addr ]]; then
	host=127.0.0.1
fi
if ! [[ $port =~ ^[0-9]+$ ]]; then
	echo "saga-healthcheck: no port (give one, or set LISTEN_ADDR=host:port)" >&2
	exit 2
fi

# A refused connection prints its reason, which lands in the health log.
# The answer is awaited 4 s at most: a hung service must fail the check, not
# hang it (Docker's own timeout would end it too, but later and silently).
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$host" >&3 || exit 1
IFS= read -r -t 4 status <&3 || exit 1
exec 3<&-
[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
