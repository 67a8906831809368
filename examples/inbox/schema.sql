-- The inbox example's tables. The consumer runs this file at every start
-- (it is embedded in the binary), so every statement is idempotent; a
-- migration tool can run it instead.

-- One row per event applied: the dedup table. The primary key on the `id`
-- header is what turns a redelivered record into a no-op
-- (INSERT ... ON CONFLICT DO NOTHING inserts nothing).
CREATE TABLE IF NOT EXISTS inbox_processed (
    event_id     text        PRIMARY KEY,           -- the record's `id` header: the outbox row's id
    topic        text        NOT NULL,              -- where it was first seen, for debugging
    partition    int         NOT NULL,
    "offset"     bigint      NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now()
);

-- The consumer's position, kept here instead of in Kafka so that it commits
-- in the same transaction as the effects it covers.
CREATE TABLE IF NOT EXISTS inbox_offsets (
    consumer    text        NOT NULL,               -- --name
    topic       text        NOT NULL,
    partition   int         NOT NULL,
    next_offset bigint      NOT NULL,               -- the next offset to read
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, topic, partition)
);

-- The example's business tables, stand-ins for your own. Neither is
-- idempotent on its own: applying an event twice bumps the version again and
-- adds a second aggregate_events row. Only inbox_processed prevents that.
CREATE TABLE IF NOT EXISTS aggregates (
    topic         text        NOT NULL,             -- outbox.event.<aggregatetype>
    aggregate_id  text        NOT NULL,             -- the record key: the outbox row's aggregateid
    version       bigint      NOT NULL,             -- events applied to this aggregate
    last_event_id text        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, aggregate_id)
);

CREATE TABLE IF NOT EXISTS aggregate_events (
    topic        text        NOT NULL,
    aggregate_id text        NOT NULL,
    version      bigint      NOT NULL,              -- the aggregate's version after this event
    event_id     text        NOT NULL,
    payload      bytea,                             -- the record value as received; NULL for a tombstone
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, aggregate_id, version)
);
