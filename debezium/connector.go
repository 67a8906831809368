package debezium

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A connector config as a Debezium user has it: the JSON a Kafka Connect
// REST call sends (POST /connectors, or PUT /connectors/<name>/config), a
// properties file as ConnectStandalone reads it, a Strimzi KafkaConnector
// resource (its spec.config), or a YAML mapping of its keys. Reading it
// keeps every key as it is written, with its line where the form has
// lines; what the keys mean is the reader's.

// Class names of Debezium's that a connector config names.
const (
	// PostgresConnector is the connector.class of Debezium's Postgres
	// connector.
	PostgresConnector = "io.debezium.connector.postgresql.PostgresConnector"
	// MessageDecoder is the transform that decodes a logical message's
	// content before the outbox router.
	MessageDecoder = "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"
)

// Connector is a connector config read from a file.
type Connector struct {
	// Path is the file it was read from; Form names its form: "JSON",
	// "properties", "Strimzi KafkaConnector" or "YAML".
	Path, Form string
	// Values are its keys as written, config provider references
	// unresolved (Resolve replaces them); no key is set twice.
	Values map[string]string
	// lines are the keys' lines in the file, where the form has them.
	lines map[string]int
	// worker are the config.providers keys of a Strimzi KafkaConnect in
	// the same file: the worker's declarations of the config providers
	// the connector config refers to.
	worker map[string]string
}

func newConnector(path, form string) *Connector {
	return &Connector{Path: path, Form: form, Values: make(map[string]string), lines: make(map[string]int)}
}

// At names a key and where it is, for errors: the file, and the key's
// line where the form has lines.
func (c *Connector) At(key string) string {
	if l, ok := c.lines[key]; ok {
		return fmt.Sprintf("connector config %s, line %d: %s", c.Path, l, key)
	}
	return fmt.Sprintf("connector config %s: %s", c.Path, key)
}

// ReadConnector reads the file path holds, b, as a connector config: by
// its extension JSON (.json) or properties (.properties), otherwise YAML
// holding a Strimzi KafkaConnector (with, in the same file, the
// KafkaConnect whose config declares the config providers) or a mapping
// with connector.class. ok is false when the file is none of these, such
// as walstream's own YAML config; a YAML file that does not parse is not
// a connector config either, for its own reader to report.
func ReadConnector(path string, b []byte) (c *Connector, ok bool, err error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		c = newConnector(path, "JSON")
		return c, true, c.readJSON(b)
	case ".properties":
		c = newConnector(path, "properties")
		return c, true, c.readProperties(b)
	}
	// Every document of the file: a KafkaConnector may come with the
	// KafkaConnect that runs it, whose config declares the providers.
	var roots []*yaml.Node
	for dec := yaml.NewDecoder(bytes.NewReader(b)); ; {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, false, nil
		}
		if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			roots = append(roots, doc.Content[0])
		}
	}
	kind := func(n *yaml.Node) string {
		if k := mappingValue(n, "kind"); k != nil {
			return k.Value
		}
		return ""
	}
	for _, root := range roots {
		if kind(root) != "KafkaConnector" {
			continue
		}
		c = newConnector(path, "Strimzi KafkaConnector")
		var errs []error
		for _, w := range roots {
			if kind(w) == "KafkaConnect" {
				errs = append(errs, c.readWorkerProviders(w))
			}
		}
		return c, true, errors.Join(append(errs, c.readStrimzi(root))...)
	}
	if len(roots) > 0 && mappingValue(roots[0], "connector.class") != nil {
		c = newConnector(path, "YAML")
		return c, true, c.readYAML(roots[0])
	}
	return nil, false, nil
}

// ConnectorFromYAML reads a connector config given as a YAML mapping of
// its keys to scalars, such as one pasted into another file, path.
func ConnectorFromYAML(path string, n *yaml.Node) (*Connector, error) {
	c := newConnector(path, "YAML")
	return c, c.readYAML(n)
}

// readWorkerProviders keeps the config.providers keys of a KafkaConnect's
// spec.config.
func (c *Connector) readWorkerProviders(root *yaml.Node) error {
	spec := mappingValue(root, "spec")
	if spec == nil {
		return nil
	}
	config := mappingValue(spec, "config")
	if config == nil || config.Kind != yaml.MappingNode {
		return nil
	}
	if c.worker == nil {
		c.worker = make(map[string]string)
	}
	for i := 0; i+1 < len(config.Content); i += 2 {
		if k, v := config.Content[i], config.Content[i+1]; isProviderKey(k.Value) {
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("connector config %s, line %d: %s: want a single value", c.Path, v.Line, k.Value)
			}
			c.worker[k.Value] = v.Value
		}
	}
	return nil
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// set records a key, refusing one given twice.
func (c *Connector) set(key, value string, line int) error {
	if _, dup := c.Values[key]; dup {
		return fmt.Errorf("%s is set twice", c.At(key))
	}
	c.Values[key] = value
	if line > 0 {
		c.lines[key] = line
	}
	return nil
}

// readJSON reads {"name": ..., "config": {...}} or the config object alone.
func (c *Connector) readJSON(b []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return fmt.Errorf("connector config %s: not a JSON object: %w", c.Path, err)
	}
	body := top
	if raw, ok := top["config"]; ok {
		body = nil // not top: Unmarshal would add to it
		if err := json.Unmarshal(raw, &body); err != nil {
			return fmt.Errorf("connector config %s: config is not a JSON object: %w", c.Path, err)
		}
		if name, ok := top["name"]; ok {
			body["name"] = name
		}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(body)) {
		v, err := jsonScalar(body[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.At(k), err))
			continue
		}
		errs = append(errs, c.set(k, v, 0))
	}
	return errors.Join(errs...)
}

// jsonScalar is a JSON string, number or boolean as Kafka Connect reads a
// config value: its text.
func jsonScalar(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch v.(type) {
	case float64, bool:
		return string(bytes.TrimSpace(raw)), nil
	}
	return "", fmt.Errorf("want a string, number or boolean, not %s", raw)
}

// readProperties reads a java.util.Properties file: key=value, key:value
// or key value lines, # and ! comments, a trailing backslash continuing a
// line, and Java's escapes.
func (c *Connector) readProperties(b []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var errs []error
	var logical strings.Builder
	start := 0
	// property takes the logical line read, which began at line start.
	property := func() {
		k, v := splitProperty(logical.String())
		logical.Reset()
		key, err1 := unescapeProperty(k)
		value, err2 := unescapeProperty(v)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("connector config %s, line %d: %w", c.Path, start, err))
			return
		}
		errs = append(errs, c.set(key, value, start))
	}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimLeft(sc.Text(), " \t\f")
		if logical.Len() == 0 {
			if line == "" || line[0] == '#' || line[0] == '!' {
				continue
			}
			start = n
		}
		// An odd number of trailing backslashes continues the line.
		trail := len(line) - len(strings.TrimRight(line, `\`))
		if trail%2 == 1 {
			logical.WriteString(line[:len(line)-1])
			continue
		}
		logical.WriteString(line)
		property()
	}
	// The file's last line continued into nothing: Properties.load keeps
	// it, less its backslash.
	if logical.Len() > 0 {
		property()
	}
	return errors.Join(append(errs, sc.Err())...)
}

// splitProperty splits a properties line at its first unescaped =, : or
// whitespace.
func splitProperty(s string) (key, value string) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '=', ':', ' ', '\t', '\f':
			value = strings.TrimLeft(s[i+1:], " \t\f")
			if s[i] == ' ' || s[i] == '\t' || s[i] == '\f' {
				if rest, ok := strings.CutPrefix(value, "="); ok {
					value = strings.TrimLeft(rest, " \t\f")
				} else if rest, ok := strings.CutPrefix(value, ":"); ok {
					value = strings.TrimLeft(rest, " \t\f")
				}
			}
			return s[:i], value
		}
	}
	return s, ""
}

func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch c := s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 >= len(s) {
				return "", fmt.Errorf("malformed \\u escape in %q", s)
			}
			r, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				return "", fmt.Errorf("malformed \\u escape in %q", s)
			}
			b.WriteRune(rune(r))
			i += 4
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// readStrimzi reads a KafkaConnector resource: spec.class, spec.tasksMax
// and spec.config.
func (c *Connector) readStrimzi(root *yaml.Node) error {
	spec := mappingValue(root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		return fmt.Errorf("connector config %s: a KafkaConnector without spec", c.Path)
	}
	var errs []error
	if md := mappingValue(root, "metadata"); md != nil && md.Kind == yaml.MappingNode {
		if name := mappingValue(md, "name"); name != nil {
			errs = append(errs, c.set("name", name.Value, name.Line))
		}
	}
	for key, field := range map[string]string{"class": "connector.class", "tasksMax": "tasks.max"} {
		if v := mappingValue(spec, key); v != nil {
			errs = append(errs, c.set(field, v.Value, v.Line))
		}
	}
	if config := mappingValue(spec, "config"); config != nil {
		errs = append(errs, c.readYAML(config))
	}
	return errors.Join(errs...)
}

// readYAML reads a mapping of keys to scalars.
func (c *Connector) readYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("connector config %s, line %d: want a mapping of keys to values", c.Path, n.Line)
	}
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("connector config %s, line %d: %s: want a single value", c.Path, v.Line, k.Value))
			continue
		}
		errs = append(errs, c.set(k.Value, v.Value, k.Line))
	}
	return errors.Join(errs...)
}
