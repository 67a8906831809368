package publish

import (
	"bufio"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/walstream/walstream/checkpoint"
	"github.com/walstream/walstream/decode"
)

// framesEvents decodes frames captured from Postgres 15 (see
// decode/testdata) into events.
func framesEvents(t *testing.T, name, schema string, cfg decode.Config) []decode.Event {
	t.Helper()
	f, err := os.Open("../decode/testdata/" + name + "/frames.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg.Schema, cfg.Table, cfg.MaxPartEvents, cfg.MaxPartBytes = schema, "outbox", 1000, 1<<20
	d := decode.New(cfg, checkpoint.Checkpoint{})
	var evs []decode.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "#") {
			continue
		}
		lsnText, hexData, _ := strings.Cut(sc.Text(), " ")
		lsn, _ := pglogrepl.ParseLSN(lsnText)
		data, _ := hex.DecodeString(hexData)
		tx, err := d.Decode(lsn, data)
		if err != nil {
			break // the cases end in a refused message; the events before it count
		}
		if tx != nil {
			evs = append(evs, tx.Events...)
		}
	}
	return evs
}

// TestGoldenRecords fixes the exact key, value and header bytes of each
// converter mode, so that consumers moving from Debezium's outbox router
// (StringConverter, or JsonConverter with schemas.enable=false) see the
// same bytes.
func TestGoldenRecords(t *testing.T) {
	type golden struct{ topic, key, value, headers string }
	for _, tc := range []struct {
		name   string
		frames string
		schema string
		conv   Converter
		expand bool
		cfg    decode.Config
		want   []golden
	}{
		{"string converter", "basic", "public", StringConverter, false, decode.Config{}, []golden{
			{"outbox.event.Order", `o-1`, `{"seq": 1, "total": 9.5}`, "id=11111111-1111-1111-1111-111111111111"},
			{"outbox.event.Order", `o-2`, `{"seq": 2}`, "id=22222222-2222-2222-2222-222222222222"},
			{"outbox.event.Customer", `c-1`, `{"seq": 3, "city": "Zürich"}`, "id=33333333-3333-3333-3333-333333333333"},
		}},
		{"json converter", "basic", "public", JSONConverter, false, decode.Config{}, []golden{
			{"outbox.event.Order", `"o-1"`, `"{\"seq\": 1, \"total\": 9.5}"`, "id=11111111-1111-1111-1111-111111111111"},
			{"outbox.event.Order", `"o-2"`, `"{\"seq\": 2}"`, "id=22222222-2222-2222-2222-222222222222"},
			{"outbox.event.Customer", `"c-1"`, `"{\"seq\": 3, \"city\": \"Zürich\"}"`, "id=33333333-3333-3333-3333-333333333333"},
		}},
		{"json converter, expanded payload", "basic", "public", JSONConverter, true, decode.Config{}, []golden{
			{"outbox.event.Order", `"o-1"`, `{"seq":1,"total":9.5}`, "id=11111111-1111-1111-1111-111111111111"},
			{"outbox.event.Order", `"o-2"`, `{"seq":2}`, "id=22222222-2222-2222-2222-222222222222"},
			{"outbox.event.Customer", `"c-1"`, `{"seq":3,"city":"Zürich"}`, "id=33333333-3333-3333-3333-333333333333"},
		}},
		{"string converter, bytea payload", "bytea-payload", "bin", StringConverter, false, decode.Config{}, []golden{
			{"outbox.event.Blob", `k-1`, "\x00\xff\x10", "id=b-1"},
		}},
		{"json converter, bytea payload as base64", "bytea-payload", "bin", JSONConverter, false, decode.Config{}, []golden{
			{"outbox.event.Blob", `"k-1"`, `"AP8Q"`, "id=b-1"},
		}},
		{"tracing column as traceparent header", "tracing", "public", StringConverter, false, decode.Config{}, []golden{
			{"outbox.event.Order", `o-10`, `{"seq": 11}`, "id=aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa,traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		}},
		{"logical messages", "logical-message", "public", StringConverter, false, decode.Config{MessagePrefix: "walstream"}, []golden{
			{"outbox.event.Order", `o-9`, `{"seq": 9}`, "id=99999999-9999-9999-9999-999999999999"},
			{"outbox.event.Order", `o-9`, `{"carrier": "DHL", "seq": 10}`, "id=m-1,x-source=shipping"},
			{"outbox.event.Note", `n-1`, `plain "text"`, "id=m-2"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewRouter("outbox.event." + RoutedByValue)
			r.Convert(tc.conv, tc.expand)
			evs := framesEvents(t, tc.frames, tc.schema, tc.cfg)
			if len(evs) != len(tc.want) {
				t.Fatalf("%d events, want %d", len(evs), len(tc.want))
			}
			for i, w := range tc.want {
				rec := r.Record(&evs[i])
				var hs []string
				for _, h := range rec.Headers {
					hs = append(hs, h.Key+"="+string(h.Value))
				}
				got := golden{rec.Topic, string(rec.Key), string(rec.Value), strings.Join(hs, ",")}
				if got != w {
					t.Errorf("record %d:\n got %q\nwant %q", i, got, w)
				}
			}
		})
	}
}

func TestJSONStringEscapesLikeJackson(t *testing.T) {
	in := "a\"b\\c\n\t\x01<&>é\u2028"
	want := `"a\"b\\c\n\t\u0001<&>é` + "\u2028" + `"`
	if got := string(jsonString(nil, []byte(in))); got != want {
		t.Fatalf("jsonString(%q) = %s, want %s", in, got, want)
	}
}
