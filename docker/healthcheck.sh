#!/bin/bash
# saga-healthcheck [PORT]: exit 0 when this container's service answers
# GET /readyz with 200, else 1 (2 for a usage error).
#
# The runtime image (debian:bookworm-slim) has no curl or wget, and adding
# them would pull in a dozen libraries for one request; bash can open a TCP
# connection itself (/dev/tcp), which is all one HTTP/1.0 GET needs.
# The port comes from the argument, else from LISTEN_ADDR (host:port); a
# wildcard host (0.0.0.0, [::], empty) is asked on the loopback address.
#
# With TLS_CERT_FILE and TLS_KEY_FILE set the listener speaks HTTPS only, and
# the same GET goes through `openssl s_client` (the image's openssl package),
# presenting the service's own certificate as the client certificate. The
# server's certificate is not verified: this is the container asking its own
# process over the loopback address, whose name a certificate need not carry;
# what is checked is that the service answers.

# A service that closes the connection before the request is written (a
# TLS listener asked in clear text) must fail the check with exit 1, not
# kill the shell with SIGPIPE (exit 141): the write then just fails.
trap "" PIPE

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
printf -v request 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$host"

# The answer is awaited 4 s at most: a hung service must fail the check, not
# hang it (Docker's own timeout would end it too, but later and silently).
if [[ -n ${TLS_CERT_FILE:-} && -n ${TLS_KEY_FILE:-} ]]; then
	[[ $host == *:* ]] && host="[$host]"
	# The status line is the first line s_client prints (-quiet); its
	# handshake notes (stderr) would only clutter the health log.
	status=$(printf '%s' "$request" |
		timeout 4 openssl s_client -quiet -connect "$host:$port" \
			-cert "$TLS_CERT_FILE" -key "$TLS_KEY_FILE" 2>/dev/null | head -n 1)
	[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
	exit
fi

# A refused connection prints its reason, which lands in the health log.
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf '%s' "$request" >&3 || exit 1
IFS= read -r -t 4 status <&3 || exit 1
exec 3<&-
[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
