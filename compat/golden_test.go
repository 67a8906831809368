package compat

// The rows of the frames the golden tests of publish/format read
// (decode/testdata/<name>/frames.txt), run through Debezium and walstream
// with the settings of each golden test, so that the bytes those tests
// expect are Debezium's (publish/format/golden_test.go and
// debezium_test.go name the case each expectation comes from).

const (
	// fixtureDDL is public.outbox of the frames (testdata/outbox.sql).
	fixtureDDL = `CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, type text, payload jsonb NOT NULL)`
	// additionalDDL adds the columns of the additional-fields frames.
	additionalDDL = fixtureDDL + `; ALTER TABLE {t} ADD COLUMN shard int, ADD COLUMN created_at timestamptz, ADD COLUMN occurred_at timestamp,
		ADD COLUMN urgent boolean, ADD COLUMN note text`
	// dbzDDL is dbz.outbox of the debezium-types frames.
	dbzDDL = `CREATE TABLE {t} (id uuid PRIMARY KEY, aggregatetype text, aggregateid bigint NOT NULL, type text, payload jsonb,
		amount numeric(10,2) DEFAULT 12.5, ratio double precision, status text DEFAULT 'pending', attempts int DEFAULT 3,
		urgent boolean DEFAULT true, note text)`
	// byteaDDL is bin.outbox of the bytea-payload frames.
	byteaDDL = `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text, aggregateid text, payload bytea)`
	// textboxDDL is dbz.textbox of the debezium-types frames.
	textboxDDL = `CREATE TABLE {t} (id text PRIMARY KEY, aggregatetype text, aggregateid integer, payload text DEFAULT 'none')`
)

var (
	basicFixture = []string{`BEGIN;
		INSERT INTO {t} VALUES ('11111111-1111-1111-1111-111111111111', 'Order', 'o-1', 'OrderCreated', '{"seq": 1, "total": 9.5}');
		INSERT INTO {t} VALUES ('22222222-2222-2222-2222-222222222222', 'Order', 'o-2', 'OrderCreated', '{"seq": 2}');
		COMMIT`,
		`INSERT INTO {t} VALUES ('33333333-3333-3333-3333-333333333333', 'Customer', 'c-1', 'CustomerMoved', '{"seq": 3, "city": "Zürich"}')`}
	byteaFixture      = []string{`INSERT INTO {t} VALUES ('b-1', 'Blob', 'k-1', '\x00ff10'::bytea)`}
	additionalFixture = []string{
		`INSERT INTO {t} VALUES ('cccccccc-cccc-cccc-cccc-cccccccccccc', 'Order', 'o-11', 'OrderPlaced', '{"seq": 12}',
			2, '2026-11-23 07:00:00.123456+01', '2026-11-23 06:00:01', true, E'two\nlines "quoted"')`,
		`INSERT INTO {t} VALUES ('dddddddd-dddd-dddd-dddd-dddddddddddd', 'Order', 'o-12', 'OrderPaid', '{"seq": 13}', NULL, NULL, NULL, NULL, NULL)`,
	}
	dbzFixture = []string{`BEGIN;
		INSERT INTO {t} VALUES ('d0000000-0000-0000-0000-000000000001', 'Order', 4711, 'Placed',
			'{"seq": 1, "price": 10.50, "big": 12345678.9, "none": null, "tags": [], "nested": {"a": null, "b": [1, 2]}, "small": 0.001, "long": 3000000000}',
			1234.50, 0.1, NULL, NULL, NULL, 'n');
		INSERT INTO {t} (id, aggregatetype, aggregateid, type, payload, ratio) VALUES ('d0000000-0000-0000-0000-000000000002', 'Order', -5, 'Deleted', NULL, 1e7);
		INSERT INTO {t} (id, aggregatetype, aggregateid, type, payload) VALUES ('d0000000-0000-0000-0000-000000000003', '', 9, 'Empty', '{"items": [{"n": 1}, {"n": 2}], "mixed": [1, "a"]}');
		COMMIT`}
	textboxFixture = []string{`BEGIN;
		INSERT INTO {t} VALUES ('t-1', 'Text', 1, '   ');
		INSERT INTO {t} VALUES ('t-2', 'Text', 2, E'\x01\t');
		INSERT INTO {t} VALUES ('t-3', 'Text', 3, U&'\00A0');
		INSERT INTO {t} VALUES ('t-4', 'Text', 4, U&'\3000');
		INSERT INTO {t} VALUES ('t-5', 'Text', 5, U&'\0085');
		INSERT INTO {t} VALUES ('t-6', 'Text', 6, NULL);
		COMMIT`}
	messageFixture = []string{`BEGIN;
		INSERT INTO {t} VALUES ('99999999-9999-9999-9999-999999999999', 'Order', 'o-9', 'OrderPlaced', '{"seq": 9}');
		SELECT pg_logical_emit_message(true, 'walstream', '{"id": "m-1", "aggregatetype": "Order", "aggregateid": "o-9", "type": "OrderShipped", "payload": {"carrier": "DHL", "seq": 10}, "headers": {"x-source": "shipping"}}');
		SELECT pg_logical_emit_message(true, 'walstream', '{"id": "m-2", "aggregatetype": "Note", "aggregateid": "n-1", "type": "Text", "payload": "plain \"text\""}');
		COMMIT`}
)

// envelopeHeaders: an envelope's headers object, walstream's own, becomes
// record headers; Debezium's router ignores the field.
var envelopeHeaders = Known{Why: "a logical message's headers", WalstreamHeaders: []string{"x-source"}}

// goldenCases are the golden tests' rows and settings.
func goldenCases() []Case {
	expand := router("table.expand.json.payload", "true")
	messages := map[string]string{
		"transforms":                  "decode,outbox",
		"transforms.decode.type":      "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent",
		"message.prefix.include.list": "walstream",
	}
	prefixed := map[string]string{"topic.prefix": "dbserver1"}
	envelope := router("table.fields.additional.placement", "amount:envelope,ratio:envelope,urgent:envelope,status:header,attempts:header,note:header")
	return []Case{
		{Name: "golden basic string", DDL: fixtureDDL, SQL: basicFixture, Settings: with(stringConverters, extendedOff)},
		{Name: "golden basic json", DDL: fixtureDDL, SQL: basicFixture, Settings: with(jsonConverters, extendedOff)},
		{Name: "golden basic expand string", DDL: fixtureDDL, SQL: basicFixture, Settings: with(stringConverters, extendedOff, expand)},
		{Name: "golden basic expand json", DDL: fixtureDDL, SQL: basicFixture, Settings: with(jsonConverters, extendedOff, expand)},
		{Name: "golden basic route", DDL: fixtureDDL, SQL: basicFixture, Settings: with(stringConverters, extendedOff, router(
			"route.topic.regex", "(?<routedByValue>Ord)(er)", "route.topic.replacement", "shop.${routedByValue}$2s"))},
		{Name: "golden bytea string", DDL: byteaDDL, SQL: byteaFixture, Settings: with(stringConverters, extendedOff)},
		{Name: "golden bytea json", DDL: byteaDDL, SQL: byteaFixture, Settings: with(jsonConverters, extendedOff)},
		{Name: "golden logical messages", DDL: fixtureDDL, SQL: messageFixture, Settings: with(stringConverters, extendedOff, messages),
			Known: []Known{envelopeHeaders}},
		{Name: "golden additional headers", DDL: additionalDDL, SQL: additionalFixture, Settings: with(stringConverters, extendedOff, router(
			"table.fields.additional.placement", "type:header:eventType,shard:header,urgent:header,note:header:x-note"))},
		{Name: "golden additional envelope json", DDL: additionalDDL, SQL: additionalFixture, Settings: with(jsonConverters, extendedOff, router(
			"table.fields.additional.placement", "type:envelope:eventType,shard:envelope,urgent:envelope,note:envelope"))},
		{Name: "golden additional envelope expanded", DDL: additionalDDL, SQL: additionalFixture, Settings: with(jsonConverters, extendedOff, expand, router(
			"table.fields.additional.placement", "type:envelope:eventType"))},
		{Name: "golden additional envelope string", DDL: additionalDDL, SQL: additionalFixture, Settings: with(stringConverters, extendedOff, router(
			"table.fields.additional.placement", "type:envelope:eventType,shard:envelope,urgent:envelope"))},
		{Name: "golden partition and timestamp", DDL: additionalDDL, SQL: additionalFixture, Settings: with(stringConverters, extendedOff, router(
			"table.fields.additional.placement", "shard:partition", "table.field.event.timestamp", "occurred_at"))},
		{Name: "golden debezium types string", DDL: dbzDDL, SQL: dbzFixture, Settings: with(stringConverters, extendedOff)},
		{Name: "golden debezium types json", DDL: dbzDDL, SQL: dbzFixture, Settings: with(jsonConverters, extendedOff)},
		{Name: "golden debezium types json schemas", DDL: dbzDDL, SQL: dbzFixture, Settings: with(schemaConverters, extendedOff)},
		{Name: "golden debezium additional string", DDL: dbzDDL, SQL: dbzFixture, Settings: with(stringConverters, extendedOff, envelope)},
		{Name: "golden debezium additional json", DDL: dbzDDL, SQL: dbzFixture, Settings: with(jsonConverters, extendedOff, envelope)},
		{Name: "golden debezium additional json schemas", DDL: dbzDDL, SQL: dbzFixture, Settings: with(schemaConverters, extendedOff, envelope, prefixed)},
		{Name: "golden debezium expand json", DDL: dbzDDL, SQL: dbzFixture, Settings: with(jsonConverters, extendedOff, expand)},
		{Name: "golden debezium expand nulls", DDL: dbzDDL, SQL: dbzFixture, Settings: with(jsonConverters, extendedOff, expand, router(
			"table.json.payload.null.behavior", "optional_bytes"))},
		{Name: "golden debezium expand json schemas", DDL: dbzDDL, SQL: dbzFixture, Settings: with(schemaConverters, extendedOff, expand)},
		{Name: "golden debezium expand string", DDL: dbzDDL, SQL: dbzFixture, Settings: with(stringConverters, extendedOff, expand)},
		{Name: "golden textbox tombstones", DDL: textboxDDL, SQL: textboxFixture, Settings: with(schemaConverters, extendedOff, map[string]string{
			"value.converter.schemas.enable": "false"}, router("route.tombstone.on.empty.payload", "true"))},
		{Name: "golden textbox blank", DDL: textboxDDL, SQL: textboxFixture, Settings: with(schemaConverters, extendedOff, map[string]string{
			"key.converter": "org.apache.kafka.connect.storage.StringConverter"})},
	}
}

// extendedOff: the golden tests' records carry no context headers.
var extendedOff = map[string]string{"extended.headers.enabled": "false"}
