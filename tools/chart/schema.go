package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// The parts of values.schema.json that are generated, by their name under
// definitions: walstream's settings, which config holds, from what the
// walstream binary and docs/configuration.md say (not from walstream's
// Go packages, so that moving its settings table moves nothing here), and
// the alerts of deploy/prometheus/alerts.yml.
//
//   - settings: the top level of walstream's config file: every setting by
//     its flag name and the other keys the file takes for it (key.converter,
//     topic.prefix, ...), the converters' key.converter.* and
//     value.converter.* settings, outbox, tables and streams.
//   - stream: an entry of streams: the same, and connector, without streams.
//   - outbox, tables: Debezium's outbox router keys, with or without their
//     transforms.<name>. prefix.
//   - alerts: metrics.prometheusRule.alerts, an entry for each alert, with a
//     threshold where its expression ends in a comparison with a number.

// Setting is one of walstream's settings as `walstream run --help` lists
// it: its flag, the kind of value the flag takes, and for an outbox router
// setting its Debezium key.
type Setting struct {
	Flag, Kind, Debezium string
}

var (
	helpFlag     = regexp.MustCompile(`^  -([a-z0-9-]+)(?: ([a-z0-9]+))?$`)
	helpDebezium = regexp.MustCompile(`\(Debezium's ([a-z.]+)\)`)
)

// ParseHelp reads the settings from the output of `walstream run --help`:
// each flag's line ("  -name kind"), then its description, indented by a
// tab (after spaces).
func ParseHelp(help string) ([]Setting, error) {
	var out []Setting
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
			out = append(out, Setting{Flag: m[1], Kind: m[2]})
		} else if m := helpDebezium.FindStringSubmatch(sc.Text()); m != nil && len(out) > 0 && strings.HasPrefix(strings.TrimLeft(sc.Text(), " "), "\t") {
			out[len(out)-1].Debezium = m[1]
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no flags: not the output of walstream run --help")
	}
	return out, nil
}

// tableRows returns the cells of the rows of the Markdown table between
// the lines "<!-- generated: name" and "<!-- end of generated: name".
func tableRows(md, name string) ([][]string, error) {
	start := strings.Index(md, "<!-- generated: "+name+";")
	end := strings.Index(md, "<!-- end of generated: "+name+" -->")
	if start < 0 || end < start {
		return nil, fmt.Errorf("no generated table %q", name)
	}
	var rows [][]string
	for _, l := range strings.Split(md[start:end], "\n")[1:] {
		if !strings.HasPrefix(l, "| `") {
			continue // the header, its rule, the markers
		}
		// A cell's own | is written \|.
		cells := strings.Split(strings.ReplaceAll(strings.Trim(l, "|"), `\|`, "\x00"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", "|"))
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("the generated table %q has no rows", name)
	}
	return rows, nil
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	braces     = regexp.MustCompile(`\{([^{}]+)\}`)
)

// codes returns the `code` spans of s, each {a,b} in one expanded into
// one code for each.
func codes(s string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(s, -1) {
		c := m[1]
		if b := braces.FindStringSubmatchIndex(c); b != nil {
			for _, alt := range strings.Split(c[b[2]:b[3]], ",") {
				out = append(out, c[:b[0]]+alt+c[b[1]:])
			}
		} else {
			out = append(out, c)
		}
	}
	return out
}

// FileKeys reads docs/configuration.md's settings table: each flag (by
// its name without --) and the keys its config file column gives it.
func FileKeys(configurationMD string) (map[string][]string, error) {
	rows, err := tableRows(configurationMD, "settings")
	if err != nil {
		return nil, fmt.Errorf("docs/configuration.md: %w", err)
	}
	out := make(map[string][]string)
	for _, r := range rows {
		if len(r) < 3 {
			return nil, fmt.Errorf("docs/configuration.md: settings row %q has %d cells", r, len(r))
		}
		flag := strings.TrimPrefix(strings.Trim(r[0], "`"), "--")
		out[flag] = codes(r[2])
	}
	return out, nil
}

// RouterKeys reads docs/configuration.md's outbox router table: each
// router flag's Debezium key.
func RouterKeys(configurationMD string) (map[string]string, error) {
	rows, err := tableRows(configurationMD, "router settings")
	if err != nil {
		return nil, fmt.Errorf("docs/configuration.md: %w", err)
	}
	out := make(map[string]string)
	for _, r := range rows {
		if len(r) < 3 {
			return nil, fmt.Errorf("docs/configuration.md: router row %q has %d cells", r, len(r))
		}
		out[strings.TrimPrefix(strings.Trim(r[0], "`"), "--")] = strings.Trim(r[2], "`")
	}
	return out, nil
}

var olderKey = regexp.MustCompile("\\(older: `([a-z.]+)`\\)")

// OlderRouterKeys reads the older names of router keys that walstream
// still takes, as docs/debezium.md's table of them gives each: "(older:
// `table.field.payload`)".
func OlderRouterKeys(debeziumMD string) []string {
	var out []string
	for _, m := range olderKey.FindAllStringSubmatch(debeziumMD, -1) {
		out = append(out, m[1])
	}
	return out
}

// converterKeys are the key.converter.* and value.converter.* settings, a
// connector config's converter settings, which walstream checks itself:
// a pattern, not each.
const converterKeys = `^(key|value)\.converter\.`

var converterKey = regexp.MustCompile(converterKeys)

// kindTypes are the JSON types a value of each kind of flag may have in
// YAML: a number or a boolean where the flag takes one, or a string,
// which may name environment variables (${VAR}).
var kindTypes = map[string]string{"": "bool", "int": "int", "duration": "duration", "string": "string", "value": "string"}

// SettingsDefinitions are the generated definitions of walstream's
// settings (settings, stream, outbox, tables), from the settings of
// `walstream run --help`, the config file keys and router keys of
// docs/configuration.md and the older router keys of docs/debezium.md.
// The help and the docs must agree: an error names what one has and the
// other lacks.
func SettingsDefinitions(settings []Setting, fileKeys map[string][]string, routerKeys map[string]string, older []string) (map[string]any, error) {
	props := make(map[string]any)
	var router []string
	var errs []error
	help := make(map[string]bool)
	for _, s := range settings {
		help[s.Flag] = true
		t, ok := kindTypes[s.Kind]
		if !ok {
			errs = append(errs, fmt.Errorf("--%s takes a %s, which values.schema.json has no type for: add it to kindTypes", s.Flag, s.Kind))
			continue
		}
		ref := map[string]any{"$ref": "#/definitions/" + t}
		if s.Debezium != "" {
			if routerKeys[s.Flag] != s.Debezium {
				errs = append(errs, fmt.Errorf("--%s: walstream run --help gives Debezium's key %s, docs/configuration.md %q", s.Flag, s.Debezium, routerKeys[s.Flag]))
			}
			router = append(router, s.Debezium)
			props[s.Flag] = ref
			continue
		}
		keys, ok := fileKeys[s.Flag]
		if !ok {
			errs = append(errs, fmt.Errorf("--%s is in walstream run --help but not in docs/configuration.md's settings", s.Flag))
			continue
		}
		for _, k := range keys {
			if !converterKey.MatchString(k) {
				props[k] = ref
			}
		}
	}
	for f := range fileKeys {
		if !help[f] {
			errs = append(errs, fmt.Errorf("--%s is in docs/configuration.md's settings but not in walstream run --help", f))
		}
	}
	for f := range routerKeys {
		if !help[f] {
			errs = append(errs, fmt.Errorf("--%s is in docs/configuration.md's router settings but not in walstream run --help", f))
		}
	}
	if _, ok := props["config"]; ok {
		errs = append(errs, errors.New("docs/configuration.md gives --config a config file key: a file cannot name another"))
	}
	if len(older) == 0 {
		errs = append(errs, errors.New("docs/debezium.md names no older router key (older: `...`)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	router = append(router, older...)
	slices.Sort(router)
	router = slices.Compact(router)
	quoted := make([]string, len(router))
	for i, k := range router {
		quoted[i] = regexp.QuoteMeta(k)
	}
	routerKey := `^(transforms\.[^.]+\.)?(` + strings.Join(quoted, "|") + `)$`
	scalar := map[string]any{"$ref": "#/definitions/scalar"}
	mapping := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props,
			"patternProperties": map[string]any{converterKeys: scalar}}
	}
	top, stream := make(map[string]any), make(map[string]any)
	for k, v := range props {
		top[k], stream[k] = v, v
	}
	top["outbox"] = map[string]any{"$ref": "#/definitions/outbox"}
	top["tables"] = map[string]any{"$ref": "#/definitions/tables"}
	top["streams"] = map[string]any{"type": "array", "items": map[string]any{"$ref": "#/definitions/stream"}}
	stream["outbox"], stream["tables"] = top["outbox"], top["tables"]
	stream["connector"] = map[string]any{"type": []any{"object", "string"}}
	return map[string]any{
		"settings": mapping(top),
		"stream":   mapping(stream),
		"outbox": map[string]any{"type": "object", "additionalProperties": false, "patternProperties": map[string]any{
			routerKey: scalar, `^(transforms\.[^.]+\.)?type$`: map[string]any{"type": "string"}}},
		"tables": map[string]any{"type": "object", "additionalProperties": map[string]any{"anyOf": []any{
			map[string]any{"type": "null"},
			map[string]any{"type": "object", "additionalProperties": false, "patternProperties": map[string]any{routerKey: scalar}}}}},
	}, nil
}

// thresholdExpr matches an expression that ends in a comparison with a
// number, which metrics.prometheusRule.alerts.<alert>.threshold replaces
// (templates/prometheusrule.yaml has the same pattern).
var thresholdExpr = regexp.MustCompile(`[<>]=? *[0-9][0-9.eE+-]*$`)

// Alert is one alert rule of deploy/prometheus/alerts.yml.
type Alert struct {
	Alert, Expr, For string
}

// ReadAlerts reads the alert rules of a Prometheus rules file.
func ReadAlerts(rules []byte) ([]Alert, error) {
	var f struct {
		Groups []struct{ Rules []Alert }
	}
	if err := yaml.Unmarshal(rules, &f); err != nil {
		return nil, err
	}
	var out []Alert
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		return nil, errors.New("no alert rules")
	}
	return out, nil
}

// HasThreshold reports whether the alert's expression ends in a
// comparison with a number, which the chart's values may change.
func (a Alert) HasThreshold() bool { return thresholdExpr.MatchString(a.Expr) }

// AlertsDefinition is the generated definition of
// metrics.prometheusRule.alerts: an entry for each alert.
func AlertsDefinition(alerts []Alert) map[string]any {
	props := make(map[string]any)
	for _, a := range alerts {
		def := "#/definitions/alert"
		if a.HasThreshold() {
			def = "#/definitions/alertWithThreshold"
		}
		props[a.Alert] = map[string]any{"$ref": def}
	}
	return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
}

// WithDefinitions returns the schema with defs as its definitions of
// those names, written as make manifests writes values.schema.json: keys
// sorted, indented by two spaces, no HTML escapes.
func WithDefinitions(schema []byte, defs map[string]any) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(schema))
	d.UseNumber()
	var s map[string]any
	if err := d.Decode(&s); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	all, _ := s["definitions"].(map[string]any)
	if all == nil {
		all = make(map[string]any)
		s["definitions"] = all
	}
	for k, v := range defs {
		all[k] = v
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.SetIndent("", "  ")
	if err := e.Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
