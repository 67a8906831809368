-- The outbox table in Debezium's layout, as walstream expects it by default.
-- Applications insert a row here in the same transaction as their business
-- change; walstream publishes it to Kafka topic outbox.event.<aggregatetype>.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregatetype text        NOT NULL,  -- routes the event: topic outbox.event.<aggregatetype>
    aggregateid   text        NOT NULL,  -- the record key: one aggregate stays on one partition
    type          text        NOT NULL,  -- event type, for consumers
    payload       jsonb       NOT NULL,  -- the record value, as Postgres renders it
    created_at    timestamptz NOT NULL DEFAULT now()
);
