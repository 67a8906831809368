package config

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/decode"
)

// routerFlag is a flag that sets one outbox router setting in m.
type routerFlag struct {
	m          map[string]string
	key, def   string
	isBoolFlag bool
}

var _ flag.Value = (*routerFlag)(nil)

func (f *routerFlag) String() string {
	if v, ok := f.m[f.key]; ok {
		return v
	}
	return f.def
}

func (f *routerFlag) Set(v string) error {
	if _, err := strconv.ParseBool(v); f.isBoolFlag && err != nil {
		return errors.New("is not true or false")
	}
	f.m[f.key] = v
	return nil
}

func (f *routerFlag) IsBoolFlag() bool { return f.isBoolFlag }

// routerFlags defines a flag for each outbox router setting, setting m.
func routerFlags(fs *flag.FlagSet, m map[string]string) {
	for _, k := range append(decode.RouterKeys(), decode.RouterKey{Key: "table.fields.additional.error.on.missing", Default: "true", Bool: true,
		Doc: "walstream's earlier form of table.field.additional.missing: false is ignore"}) {
		name := debezium.RouterSettings[k.Key]
		usage := k.Doc + " (Debezium's " + k.Key + ") ($" + EnvName(name) + ")"
		fs.Var(&routerFlag{m: m, key: k.Key, def: k.Default, isBoolFlag: k.Bool}, name, usage)
	}
}

// outboxes builds every table's mapping, and the one logical messages use.
// Errors in the shared settings name their flags; when those are wrong,
// every table's are too.
func (c *Config) outboxes() []error {
	var err error
	c.Messages, err = decode.NewOutbox("", "logical message "+c.MessagePrefix, c.Router)
	if c.Messages != nil {
		c.Messages.MessageNullFields = c.MessageNullFields
	}
	if err != nil {
		var out []error
		for _, e := range unjoin(err) {
			var se *decode.SettingError
			if errors.As(e, &se) && debezium.RouterSettings[se.Key] != "" {
				f := debezium.RouterSettings[se.Key]
				e = fmt.Errorf("--%s ($%s, Debezium's %s): %q: %w", f, EnvName(f), se.Key, se.Value, se.Err)
			}
			out = append(out, e)
		}
		return out
	}
	var errs []error
	listed := make(map[string]bool)
	c.Outboxes = nil
	for _, t := range c.Names.Tables {
		listed[t.String()] = true
		o, err := decode.NewOutbox(t.Schema, t.Name, c.Router, c.TableSettings[t.String()])
		if err != nil {
			errs = append(errs, fmt.Errorf("tables.%s: %w", t, err))
		}
		c.Outboxes = append(c.Outboxes, o)
	}
	for _, name := range slices.Sorted(maps.Keys(c.TableSettings)) {
		if !listed[name] {
			errs = append(errs, fmt.Errorf("tables.%s: is not one of the outbox tables %q", name, c.Table))
		}
	}
	return errs
}

// unjoin is the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}
