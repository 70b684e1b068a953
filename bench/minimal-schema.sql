-- minimal-schema.sql: the two tables of bench/minimal.sql (the yardstick
-- scripts/bench runs next to pgsaga). Only what such a commit cannot do
-- without: a primary key on each table, NOT NULL columns.
CREATE SCHEMA minimal;

-- The state row: what a saga, a payment or a reservation is at the least.
CREATE TABLE minimal.state (
    id   uuid PRIMARY KEY,
    body jsonb NOT NULL
);

-- The outbox row: the message to send, written in the same transaction.
CREATE TABLE minimal.outbox (
    message_id uuid PRIMARY KEY,
    payload    jsonb NOT NULL
);

-- A version 7 UUID: 48 bits of Unix milliseconds, the version nibble 7,
-- then random bits (74 of gen_random_uuid()'s 122). Keys made in the same
-- millisecond are not ordered among themselves, which keeps inserts on
-- the index's right-most leaf all the same.
CREATE FUNCTION minimal.uuid_v7() RETURNS uuid
    LANGUAGE sql VOLATILE
    RETURN encode(set_byte(overlay(uuid_send(gen_random_uuid())
                                   PLACING substring(int8send(
                                       (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                       FROM 3)
                                   FROM 1 FOR 6),
                           6, 112 + (random() * 15)::int),
                  'hex')::uuid;
