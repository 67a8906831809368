package publish

import (
	"context"
	"errors"

	"github.com/walstream/walstream/decode"
)

// Debezium's BinaryDataConverter (io.debezium.converters.BinaryDataConverter):
// a value whose Connect schema is bytes is written as it is, a null one as
// no value, and anything else by the converter delegate.converter.type
// names; without one, Debezium fails there.

// errNoDelegate is a key or value that is not bytes under a
// BinaryDataConverter without delegate.converter.type: Debezium fails.
var errNoDelegate = errors.New("BinaryDataConverter writes bytes as they are and this is not bytes; give it a delegate.converter.type, as Debezium needs one here")

// binaryKey is BinaryDataConverter's key without a delegate: a key is
// never bytes.
type binaryKey struct{}

func (binaryKey) encode(context.Context, []byte, string, *decode.Event) ([]byte, error) {
	return nil, errNoDelegate
}

// binaryValue is BinaryDataConverter's value: a bytea payload's bytes as
// they are, a null one as no value, anything else (another payload type,
// an envelope) its delegate's.
type binaryValue struct {
	payload
	delegate encoder // nil without delegate.converter.type
}

func (v *binaryValue) encode(ctx context.Context, dst []byte, topic string, ev *decode.Event) ([]byte, error) {
	switch {
	case ev.Tombstone || !v.envelope && ev.Payload == nil:
		return nil, nil
	case ev.PayloadBinary && !v.envelope:
		return append(dst, ev.Payload...), nil
	case v.delegate == nil:
		return nil, errNoDelegate
	}
	return v.delegate.encode(ctx, dst, topic, ev)
}
