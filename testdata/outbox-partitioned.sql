-- The outbox table of outbox.sql, range-partitioned by created_at: a common
-- way to keep an outbox small, dropping old partitions instead of deleting
-- rows. Rows of a time no partition covers go to the default partition.
-- walstream creates its publication WITH (publish_via_partition_root = true)
-- for it, so that every partition's rows arrive as public.outbox's.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid        NOT NULL DEFAULT gen_random_uuid(),
    aggregatetype text        NOT NULL,  -- routes the event: topic outbox.event.<aggregatetype>
    aggregateid   text        NOT NULL,  -- the record key: one aggregate stays on one partition
    type          text        NOT NULL,  -- event type, for consumers
    payload       jsonb       NOT NULL,  -- the record value, as Postgres renders it
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id, created_at)         -- a partitioned table's keys include the partition key
) PARTITION BY RANGE (created_at);
CREATE TABLE IF NOT EXISTS public.outbox_default PARTITION OF public.outbox DEFAULT;
