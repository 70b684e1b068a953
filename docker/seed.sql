-- Demo stock for `docker compose up`, loaded by the one-shot `seed` service
-- once saga-inventory has created its tables. ON CONFLICT: a restart, or
-- stock changed since, is left alone.
INSERT INTO inventory.stock (item_id, available)
VALUES ('A001', 100), ('A002', 50), ('A003', 10)
ON CONFLICT (item_id) DO NOTHING;
