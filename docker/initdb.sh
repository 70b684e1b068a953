#!/bin/bash
# Bootstraps pgsaga in the official postgres image: mounted into
# /docker-entrypoint-initdb.d/, it runs once, when the data volume is new,
# against POSTGRES_DB as the superuser (over the image's local socket).
#
# sql/bootstrap.sql (and sql/shipping/shipping.sql) take the roles' passwords as psql variables; they come
# from the container's environment (docker-compose.yml passes them through
# from .env). To re-run it later (harmless; it puts roles, ownership and
# privileges back as written), e.g. after changing a password:
#
#   docker compose exec postgres /docker-entrypoint-initdb.d/10-pgsaga.sh
#
# The entrypoint sources a script that is not executable: so no `exit` and
# no shell options here, which would leak into the entrypoint; a missing
# variable stops the initialisation through ${VAR:?}.

psql -v ON_ERROR_STOP=1 --no-psqlrc \
	--username "${POSTGRES_USER:-postgres}" \
	--dbname "${POSTGRES_DB:-postgres}" \
	-v orchestrator_password="${ORCHESTRATOR_DB_PASSWORD:?ORCHESTRATOR_DB_PASSWORD is not set}" \
	-v payment_password="${PAYMENT_DB_PASSWORD:?PAYMENT_DB_PASSWORD is not set}" \
	-v inventory_password="${INVENTORY_DB_PASSWORD:?INVENTORY_DB_PASSWORD is not set}" \
	-v auditor_password="${AUDITOR_DB_PASSWORD:?AUDITOR_DB_PASSWORD is not set}" \
	-f "${PGSAGA_BOOTSTRAP:-/pgsaga/bootstrap.sql}"
# Then shipping, the participant made of SQL functions (sql/shipping/), when
# its file is mounted (PGSAGA_SHIPPING): its role, schema and functions.
if [ -r "${PGSAGA_SHIPPING:-/pgsaga/shipping.sql}" ]; then
	psql -v ON_ERROR_STOP=1 --no-psqlrc \
		--username "${POSTGRES_USER:-postgres}" \
		--dbname "${POSTGRES_DB:-postgres}" \
		-v shipping_password="${SHIPPING_DB_PASSWORD:?SHIPPING_DB_PASSWORD is not set}" \
		-f "${PGSAGA_SHIPPING:-/pgsaga/shipping.sql}"
fi
