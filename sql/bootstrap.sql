-- pgsaga bootstrap: roles, schemas and privileges.
--
-- Run once by a superuser in the target database:
--
--   psql -v ON_ERROR_STOP=1 -f sql/bootstrap.sql \
--        [-v orchestrator_password=...] [-v payment_password=...] \
--        [-v inventory_password=...] [-v auditor_password=...] DBNAME
--
-- Running it again is harmless: it creates what is missing and puts role
-- attributes, ownership and privileges back to what is written here. A role
-- gets a password only when its variable is given; otherwise an existing
-- password is left alone (local trust or peer authentication needs none).
--
-- The model: each service connects as its own role, owns its schema and
-- creates its tables there itself (migrations compiled into the binary), so it
-- can read and write its own schema and nothing else. saga_auditor may read
-- all three schemas, tables created later included, and write nothing.
--
-- The database is assumed to be pgsaga's own: PUBLIC loses CREATE and
-- TEMPORARY on it and CREATE on schema public. PUBLIC keeps CONNECT so that
-- other existing users are not locked out; the four roles get CONNECT
-- explicitly so revoking it from PUBLIC later does not break pgsaga.

\set ON_ERROR_STOP 1
\set QUIET 1
SET client_min_messages = warning;

BEGIN;

-- Roles. CREATE ROLE has no IF NOT EXISTS; the attributes are (re)set below
-- so that a role created by hand, or changed since, ends up the same.
DO $$
DECLARE
	r text;
BEGIN
	FOREACH r IN ARRAY ARRAY['saga_orchestrator', 'saga_payment', 'saga_inventory',
				 'saga_auditor']
	LOOP
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
			EXECUTE format('CREATE ROLE %I LOGIN', r);
		END IF;
	END LOOP;
END
$$;

ALTER ROLE saga_orchestrator LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE saga_payment LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE saga_inventory LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE saga_auditor LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;

COMMENT ON ROLE saga_orchestrator IS 'pgsaga: saga-orchestrator service; owns schema orchestrator';
COMMENT ON ROLE saga_payment IS 'pgsaga: saga-payment service; owns schema payment';
COMMENT ON ROLE saga_inventory IS 'pgsaga: saga-inventory service; owns schema inventory';
COMMENT ON ROLE saga_auditor IS 'pgsaga: read-only access to schemas orchestrator, payment, inventory';

-- Passwords: psql variables are not expanded inside DO bodies, hence \if.
\if :{?orchestrator_password}
ALTER ROLE saga_orchestrator PASSWORD :'orchestrator_password';
\endif
\if :{?payment_password}
ALTER ROLE saga_payment PASSWORD :'payment_password';
\endif
\if :{?inventory_password}
ALTER ROLE saga_inventory PASSWORD :'inventory_password';
\endif
\if :{?auditor_password}
ALTER ROLE saga_auditor PASSWORD :'auditor_password';
\endif

-- Convenience for psql sessions; the services set nothing on this and
-- migrations set search_path themselves. The auditor gets none: the three
-- schemas hold tables of the same names, so it should qualify them.
ALTER ROLE saga_orchestrator SET search_path = orchestrator;
ALTER ROLE saga_payment SET search_path = payment;
ALTER ROLE saga_inventory SET search_path = inventory;

-- A second guard besides the missing privileges: the auditor's transactions
-- are read-only unless it asks otherwise, so even a function someone grants
-- it by mistake cannot write.
ALTER ROLE saga_auditor SET default_transaction_read_only = on;

-- Database-level privileges.
SELECT format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM PUBLIC', current_database())
\gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO saga_orchestrator, saga_payment, saga_inventory, saga_auditor',
	      current_database())
\gexec

-- Schema public: PostgreSQL 15 creates it without CREATE for PUBLIC, older
-- clusters (and upgraded ones) still grant it. USAGE stays: extensions live
-- there and it holds nothing of pgsaga's.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- Schemas, each owned by its service's role. ALTER ... OWNER puts back an
-- owner changed by hand; it is a no-op otherwise.
CREATE SCHEMA IF NOT EXISTS orchestrator AUTHORIZATION saga_orchestrator;
CREATE SCHEMA IF NOT EXISTS payment AUTHORIZATION saga_payment;
CREATE SCHEMA IF NOT EXISTS inventory AUTHORIZATION saga_inventory;
ALTER SCHEMA orchestrator OWNER TO saga_orchestrator;
ALTER SCHEMA payment OWNER TO saga_payment;
ALTER SCHEMA inventory OWNER TO saga_inventory;

COMMENT ON SCHEMA orchestrator IS 'pgsaga: sagas, their history, idempotency records, outbox and inbox of saga-orchestrator';
COMMENT ON SCHEMA payment IS 'pgsaga: accounts, payments, outbox and inbox of saga-payment';
COMMENT ON SCHEMA inventory IS 'pgsaga: stock, reservations, outbox and inbox of saga-inventory';

-- Nobody but the owner and the auditor may look into a schema. New schemas
-- grant PUBLIC nothing; the REVOKE undoes a grant made by hand.
REVOKE ALL ON SCHEMA orchestrator FROM PUBLIC;
REVOKE ALL ON SCHEMA payment FROM PUBLIC;
REVOKE ALL ON SCHEMA inventory FROM PUBLIC;

-- Functions are executable by PUBLIC by default. Without USAGE on the schema
-- nobody else could reach them anyway, but the auditor has USAGE: take
-- EXECUTE away from PUBLIC for functions the service roles create, now and
-- later, so the auditor can call none of them (the operator functions write).
-- Trigger functions need no EXECUTE grant to fire.
ALTER DEFAULT PRIVILEGES FOR ROLE saga_orchestrator REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_payment REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_inventory REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA orchestrator FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA payment FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA inventory FROM PUBLIC;

-- The auditor: USAGE and SELECT, on what exists now (bootstrap re-run after
-- the services migrated) and on what the owners create later. Default
-- privileges are per creating role, hence FOR ROLE.
GRANT USAGE ON SCHEMA orchestrator, payment, inventory TO saga_auditor;
GRANT SELECT ON ALL TABLES IN SCHEMA orchestrator TO saga_auditor;
GRANT SELECT ON ALL TABLES IN SCHEMA payment TO saga_auditor;
GRANT SELECT ON ALL TABLES IN SCHEMA inventory TO saga_auditor;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_orchestrator IN SCHEMA orchestrator
	GRANT SELECT ON TABLES TO saga_auditor;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_payment IN SCHEMA payment
	GRANT SELECT ON TABLES TO saga_auditor;
ALTER DEFAULT PRIVILEGES FOR ROLE saga_inventory IN SCHEMA inventory
	GRANT SELECT ON TABLES TO saga_auditor;

COMMIT;
