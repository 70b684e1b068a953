# shellcheck shell=bash
# services.sh: starting the three services and waiting for them, the one way
# scripts/up and scripts/bench both do it. Sourced after common.sh:
#
#   svc_start BUILD_DIR DB_URL BASE LOG [NAME=VALUE...]
#       starts orchestrator, payment and inventory on 127.0.0.1:BASE, BASE+1,
#       BASE+2, each told the others' URLs and connecting to DB_URL's database
#       as its own role (role_url), with the extra settings given (TRANSPORT,
#       AMQP_URL, ...) on top of the caller's environment. LOG "-": their
#       output on stdout, each line prefixed by the service's name; else each
#       appends to LOG-NAME.log, after a line "-- started on port P". Sets
#       svc_pids to their pids and adds them to svc_all.
#   svc_wait BASE SECONDS
#       waits until each answers GET /readyz with 200. 0: all are ready; 1:
#       service svc_failed (0, 1 or 2) exited meanwhile; dies when one is not
#       ready after SECONDS.
#
# svc_names and svc_roles give each index's name and database role; stop
# them with stop_pids "${svc_pids[@]}" (common.sh). Set before svc_start, for
# instance for TLS:
#   svc_scheme   http (default) or https: the peers' URLs; with https, the
#                readiness probe verifies the services with the CA file svc_ca
#   svc_env_fn   a function, called as "$svc_env_fn" INDEX before service
#                INDEX starts, printing NAME=VALUE lines for that service
#                alone (its certificate, say); they come last, so a
#                DATABASE_URL among them replaces the role's
#   svc_bin_fn   a function, called as "$svc_bin_fn" INDEX BUILD_DIR,
#                printing the binary that runs service INDEX (default:
#                BUILD_DIR/src/NAME/saga-NAME)

svc_names=(orchestrator payment inventory)
svc_roles=(saga_orchestrator saga_payment saga_inventory)
# shipping's PARTICIPANT_COMMANDS (saga-participant over sql/shipping/), as
# scripts/up and scripts/bench --compare sagas run it
# shellcheck disable=SC2034  # read by scripts/up and scripts/bench
svc_shipping_commands='ShipOrderCommand=ship_order(OrderShipped|ShippingFailed)/CancelShipmentCommand=cancel_shipment(ShipmentCancelled)'
svc_pids=()
svc_all=() # every pid started, for a cleanup after a failure half-way
svc_failed=
svc_scheme=${svc_scheme:-http}
svc_ca=${svc_ca:-}
svc_env_fn=${svc_env_fn:-}
svc_bin_fn=${svc_bin_fn:-}

# Prefixes every line of a service's output with its name. Ctrl-C reaches the
# whole process group: the prefixer ignores it so that the service's last
# words while it drains still get through; it ends at the service's EOF.
svc_prefix() {
	local line
	trap '' INT TERM
	while IFS= read -r line || [[ -n $line ]]; do
		printf '%-12s | %s\n' "$1" "$line"
	done
}

svc_start() {
	local build_dir=$1 db_url=$2 base=$3 log=$4 i n
	shift 4
	local peers=(
		"ORCHESTRATOR_URL=$svc_scheme://127.0.0.1:$base"
		"PAYMENT_URL=$svc_scheme://127.0.0.1:$((base + 1))"
		"INVENTORY_URL=$svc_scheme://127.0.0.1:$((base + 2))"
	)
	svc_pids=()
	for i in 0 1 2; do
		n=${svc_names[i]}
		local own=() bin=$build_dir/src/$n/saga-$n
		[[ -z $svc_env_fn ]] || mapfile -t own < <("$svc_env_fn" "$i")
		[[ -z $svc_bin_fn ]] || bin=$("$svc_bin_fn" "$i" "$build_dir")
		local cmd=(env "${peers[@]}" "$@"
			DATABASE_URL="$(role_url "$db_url" "${svc_roles[i]}")"
			LISTEN_ADDR="127.0.0.1:$((base + i))"
			${own[@]+"${own[@]}"}
			"$bin")
		if [[ $log == - ]]; then
			"${cmd[@]}" </dev/null > >(svc_prefix "$n") 2>&1 &
		else
			printf -- '-- started on port %s\n' "$((base + i))" >>"$log-$n.log"
			"${cmd[@]}" </dev/null >>"$log-$n.log" 2>&1 &
		fi
		svc_pids+=($!)
		svc_all+=($!)
	done
}

svc_alive() {
	kill -0 "${svc_pids[svc_failed]}" 2>/dev/null
}

svc_ready() {
	[[ $(http_status "$1" /readyz ${svc_ca:+"$svc_ca"}) == 200 ]]
}

svc_wait() {
	local base=$1 limit=$2 rc
	for svc_failed in 0 1 2; do
		rc=0
		wait_until "$limit" 0.2 svc_alive svc_ready "$((base + svc_failed))" || rc=$?
		case $rc in
		0) ;;
		2) return 1 ;;
		*) die "${svc_names[svc_failed]} is not ready after $limit s" ;;
		esac
	done
	svc_failed=
}
