// Package format makes outbox events into the Kafka records Debezium's
// outbox event router writes, byte for byte: the topic by the table's
// route, the key and the value by a Kafka Connect converter each, the
// payload expanded as table.expand.json.payload asks, and the headers. It
// builds kgo.Record values and sends nothing: Kafka transport is package
// publish's, which also decides what becomes of an event that cannot be
// made a record.
//
// Router.Record (record.go) makes an event's record, its routes and
// encoders picked by table name (Outbox.Name); DeadLetter makes a bad
// event's record for the dead-letter topic; EventKey tells an event's
// record read back (for walstream diff). The converters (Converter:
// String, JSON, JSONSchema, which is JSON with schemas, Binary, Avro) are
// each an encoder of a key or a value (encode.go, with newEncoders the one
// place that picks them, and avro.go); column types as Kafka Connect
// writes them are types.go's and javafmt.go's (numbers as Java prints
// them), table.expand.json.payload expand.go's, and logical messages'
// records message.go's.
//
// The only schema registry client (registry.go, franz-go's pkg/sr)
// registers and looks up the Avro encoder's schemas, their ids cached per
// schema and topic; its failures are a RegistryError, passed on as they
// are (not bad input).
package format
