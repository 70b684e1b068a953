# One image for the pgsaga services; the command picks the service:
#
#   docker build -t pgsaga .
#   docker run --rm pgsaga saga-payment --help
#
# Stage 1 builds with meson on Debian bookworm. Stage 2 is bookworm-slim with
# only the runtime libraries (libpq5, libevent-2.1-7, libevent-openssl-2.1-7,
# libssl3, libjson-c5, librabbitmq4), the openssl command (the health check
# over HTTPS), the four binaries (saga-participant runs a participant made of
# SQL functions, such as sql/shipping/), the shipped saga definitions (for
# SAGA_DEFINITIONS_DIR) and a health check script, run as an unprivileged
# user. Migrations are compiled into the binaries.

FROM debian:bookworm AS build

RUN apt-get update \
	&& apt-get install -y --no-install-recommends \
		build-essential meson ninja-build pkg-config python3 \
		libpq-dev libevent-dev libssl-dev libjson-c-dev librabbitmq-dev check \
	&& rm -rf /var/lib/apt/lists/*
# Marks this stage's images, which stay behind untagged as the build cache:
# the compose suite removes those that newer builds have superseded.
LABEL org.pgsaga.stage=build

WORKDIR /src
# The top meson.build names tests/ and deploy/ as subdirs and installs the
# README, the CHANGELOG and docs/, so they must be here even though only the
# services are built (tests/docs names scripts/settings-doc).
COPY meson.build meson_options.txt README.md CHANGELOG.md ./
COPY sql/ sql/
COPY src/ src/
COPY tests/ tests/
COPY deploy/ deploy/
COPY docs/ docs/
COPY scripts/settings-doc scripts/
# scripts/commit-id names the commit that --version reports. The context has
# no .git, so the commit comes in as an argument, written where a release
# tarball keeps it (COMMIT); without it the binaries say "commit unknown":
#   docker build --build-arg PGSAGA_COMMIT=$(git rev-parse --short=12 HEAD) .
COPY scripts/commit-id scripts/
ARG PGSAGA_COMMIT=

RUN if [ -n "$PGSAGA_COMMIT" ]; then echo "$PGSAGA_COMMIT" >COMMIT; fi \
	&& meson setup /build --buildtype=release \
	&& meson compile -C /build saga-orchestrator saga-payment saga-inventory saga-participant \
	&& install -D -s -m 0755 -t /out \
		/build/src/orchestrator/saga-orchestrator \
		/build/src/payment/saga-payment \
		/build/src/inventory/saga-inventory \
		/build/src/participant/saga-participant


FROM debian:bookworm-slim

RUN apt-get update \
	&& apt-get install -y --no-install-recommends libpq5 libevent-2.1-7 libevent-openssl-2.1-7 libssl3 \
		libjson-c5 librabbitmq4 openssl \
	&& rm -rf /var/lib/apt/lists/* \
	&& groupadd --system --gid 10001 saga \
	&& useradd --system --uid 10001 --gid saga --no-create-home \
		--home-dir /nonexistent --shell /usr/sbin/nologin saga

COPY --from=build /out/ /usr/local/bin/
# bookworm-slim has no curl or wget: the health check is a few lines of bash
# speaking HTTP/1.0 over /dev/tcp, or through `openssl s_client` when the
# service has TLS_CERT_FILE (see the script; the openssl package is ~2 MB on
# top of the libssl3 the services link anyway).
COPY docker/healthcheck.sh /usr/local/bin/saga-healthcheck
RUN chmod 0755 /usr/local/bin/saga-healthcheck
# The shipped saga definitions: the orchestrator registers them at start with
# SAGA_DEFINITIONS_DIR=/usr/local/share/pgsaga/definitions (docker-compose.yml).
COPY src/orchestrator/definitions/ /usr/local/share/pgsaga/definitions/

# A service's own default address is 127.0.0.1:808x, unreachable from
# outside a container: listen on all interfaces unless told otherwise.
ENV LISTEN_ADDR=0.0.0.0:8080
EXPOSE 8080 8081 8082 8083

# Numeric, so that runAsNonRoot-style checks can verify it without /etc/passwd.
USER 10001:10001

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
	CMD ["saga-healthcheck"]

# SIGTERM drains in-flight work and exits 0 (up to 10 s).
STOPSIGNAL SIGTERM
CMD ["saga-orchestrator"]
