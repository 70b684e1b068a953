-- Demo stock, the one seed of both ways to run pgsaga: scripts/up runs it
-- with psql once saga-inventory has created its tables, and so does the
-- one-shot `seed` service of docker-compose.yml. The README's tour relies on
-- it: A001 completes, B001 (no stock) compensates.
--
-- Plain INSERTs as an operator would write them (starting_stock fills
-- itself); ON CONFLICT: a restart, or stock changed since, is left alone.
INSERT INTO inventory.stock (item_id, available)
VALUES ('A001', 100), ('A002', 10), ('B001', 0)
ON CONFLICT (item_id) DO NOTHING;
