# shellcheck shell=bash
# common.sh: what the scripts under scripts/ share. Sourced, never run:
#
#   # shellcheck source=scripts/lib/common.sh
#   . "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#
# It only defines functions (and reads nothing but $prog and $die_status when
# they are called), so it may be sourced before or after the script's own cd.
#
#   say MSG...                 "$prog: MSG" on stderr
#   die MSG...                 say, then exit $die_status (default 1)
#   is_root                    the caller is root
#   as_user USER CMD...        CMD as USER when root (setpriv), else as the caller;
#                              the lock's fd 9 closed either way
#   private_dir PREFIX DIR     prints /tmp/PREFIX-<12 hex digits of sha1(realpath DIR)>
#   check_private_dir DIR USER fails unless DIR is missing or a real directory of USER
#   lock FILE                  flock on fd 9, at most 60 s; once per process
#   pg_bindir                  prints the PostgreSQL server binaries' directory
#   port_in_use PORT           something listens on 127.0.0.1:PORT
#   free_ports N               prints N distinct free TCP ports of 127.0.0.1
#   wait_until S STEP ALIVE CMD...
#                              runs CMD every STEP s until it succeeds (0); 2 as
#                              soon as ALIVE fails, 1 after S seconds
#   http_status PORT PATH [CA] HTTP status of GET PATH on 127.0.0.1:PORT, or 000;
#                              with CA (a PEM file): over HTTPS, verified by it (curl)
#   http_ready PORT            GET /readyz on 127.0.0.1:PORT answers 200
#   role_url URL ROLE          URL's database, connecting as ROLE
#   db_url URL DB              a postgresql:// URL with database DB instead, its
#                              query (sslmode=, sslrootcert=, ...) kept
#   stop_pids PID...           SIGTERM, 15 s to end, then SIGKILL; reaps them
#
# scripts/lib/services.sh starts and stops the three services (scripts/up,
# scripts/bench).

say() {
	printf '%s: %s\n' "${prog:-${0##*/}}" "$*" >&2
}

die() {
	say "$*"
	exit "${die_status:-1}"
}

is_root() {
	[[ $(id -u) -eq 0 ]]
}

# Runs a command as USER (when root; else as the caller, who owns everything
# then). Lock fd 9 is closed: a server inheriting it would hold the lock for
# its lifetime. The caller chooses the working directory: one USER can enter
# (a cwd under /root makes initdb and pg_ctl complain).
as_user() {
	local user=$1
	shift
	if is_root; then
		setpriv --reuid="$user" --regid="$user" --init-groups -- "$@" 9>&-
	else
		"$@" 9>&-
	fi
}

# As root, a server's files live in /tmp (DIR may lie under a path its user
# cannot traverse, e.g. a clone under /root, mode 700), in a directory named
# after DIR's real path.
private_dir() {
	local hash
	hash=$(printf '%s' "$(realpath -m -- "$2")" | sha1sum | cut -c1-12)
	printf '/tmp/%s-%s\n' "$1" "$hash"
}

# /tmp is shared: accept a directory there only if it is a real one owned by
# USER, never something another user planted.
check_private_dir() {
	[[ -e $1 || -L $1 ]] || return 0
	[[ -d $1 && ! -L $1 ]] || die "$1 exists and is not a directory"
	[[ $(stat -c %U -- "$1") == "$2" ]] || die "$1 is not owned by $2"
}

# Two starts of one server at the same moment would both set it up. A lock
# that is not released within a minute is stuck, not busy: go on without it.
# Nothing to lock when FILE's directory does not exist (yet).
lock() {
	[[ -d $(dirname -- "$1") ]] || return 0
	[[ -n ${locked:-} ]] && return 0
	locked=1
	exec 9>"$1"
	flock -w 60 9 || say "$(dirname -- "$1") stays locked; going on"
}

# The server binaries are not on PATH on Debian: ask pg_config, else take the
# highest version installed, else PATH.
pg_bindir() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if [[ -n $d && -x $d/initdb && -x $d/pg_ctl ]]; then
			printf '%s\n' "$d"
			return
		fi
	fi
	d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	if [[ -x $d/initdb && -x $d/pg_ctl ]]; then
		printf '%s\n' "$d"
		return
	fi
	d=$(command -v initdb 2>/dev/null) || return 1
	dirname "$d"
}

port_in_use() {
	# A successful connect means someone listens; bash's /dev/tcp needs no tools.
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# All held until all are known, so they differ.
free_ports() {
	python3 - "$1" <<-'EOF'
		import socket, sys
		socks = []
		for _ in range(int(sys.argv[1])):
		    s = socket.socket()
		    s.bind(("127.0.0.1", 0))
		    socks.append(s)
		print(" ".join(str(s.getsockname()[1]) for s in socks))
	EOF
}

# wait_until SECONDS STEP ALIVE CMD...: ALIVE is a command without arguments
# (`true` when nothing can die meanwhile).
wait_until() {
	local deadline=$((SECONDS + $1)) step=$2 alive=$3
	shift 3
	until "$@"; do
		"$alive" || return 2
		((SECONDS < deadline)) || return 1
		sleep "$step"
	done
}

http_status() {
	local port=$1 path=$2 ca=${3:-} line
	if [[ -n $ca ]]; then
		curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$ca" \
			"https://127.0.0.1:$port$path" || true
		return
	fi
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port$path" ||
			true
		return
	fi
	# No curl: bash's /dev/tcp.
	{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || {
		echo 000
		return
	}
	printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nConnection: close\r\n\r\n' \
		"$path" "$port" >&3
	line=
	IFS= read -r -t 2 line <&3 || true
	exec 3<&- 3>&-
	line=${line#HTTP/* }
	line=${line%% *}
	printf '%s\n' "${line:-000}"
}

http_ready() {
	[[ $(http_status "$1" /readyz) == 200 ]]
}

# A role's connection string on the database of URL. URL form: the user part
# (and a password, which belongs to the other role) is replaced, and a user=
# query parameter dropped; key=value form: a later user= wins in libpq.
role_url() {
	local base=$1 role=$2 scheme rest auth tail query
	if [[ $base =~ ^(postgres|postgresql):// ]]; then
		scheme=${base%%://*}
		rest=${base#*://}
		auth=${rest%%[/?]*}
		tail=${rest:${#auth}}
		auth=${auth##*@}
		if [[ $tail == *\?* ]]; then
			query=${tail#*\?}
			tail=${tail%%\?*}
			query=$(printf '%s' "$query" | tr '&' '\n' | grep -v '^user=' | paste -sd '&' || true)
			[[ -n $query ]] && tail+="?$query"
		fi
		printf '%s://%s@%s%s\n' "$scheme" "$role" "$auth" "$tail"
	else
		printf '%s user=%s\n' "$base" "$role"
	fi
}

# The same server and settings, another database: the path's last segment
# replaced, the query kept (it may hold paths with slashes: sslrootcert=).
db_url() {
	local base=${1%%\?*}
	printf '%s/%s%s\n' "${base%/*}" "$2" "${1#"$base"}"
}

# The services drain what is in flight on SIGTERM; give them time, then insist.
stop_pids() {
	local pid deadline
	for pid in "$@"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	deadline=$((SECONDS + 15))
	for pid in "$@"; do
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}
