package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/walstream/walstream/debezium"
	"go.yaml.in/yaml/v3"
)

// A Debezium connector config in the place of walstream's config file
// (--config), or under a stream's connector:, mapped onto the settings by
// debezium.Translate; and the config file it is equivalent to.

// applyConnector sets every flag nothing more specific set from a
// connector config, and notes the keys it ignores. In a stream's entry
// (layer, such as "streams[1]"), a setting the config gives that the
// command line or the environment set too (cli) is an error, as the
// entry's own keys are: WALSTREAM_PG_URL left in a pod's environment must
// not point the stream at another database without a word. Debezium's
// default of a key the config leaves out yields to them, as walstream's
// defaults do.
func (c *Config) applyConnector(fs *flag.FlagSet, set map[string]bool, cc *debezium.Connector, layer string, cli map[string]bool) error {
	tr, err := debezium.Translate(cc, c.resolving)
	var errs []error
	errs = append(errs, err)
	for _, name := range slices.Sorted(maps.Keys(tr.Settings)) {
		if layer != "" && cli[name] && !tr.Defaults[name] {
			at := fmt.Sprintf("connector config %s (--%s)", cc.Path, name)
			if key, ok := tr.From[name]; ok {
				at = cc.At(key)
			}
			errs = append(errs, fmt.Errorf("%s (%s): is also set by --%s or $%s, which a stream's own settings cannot override; keep one", at, layer, name, EnvName(name)))
			continue
		}
		if set[name] {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			errs = append(errs, fmt.Errorf("connector config %s: no flag %s", cc.Path, name))
			continue
		}
		if err := fs.Set(name, tr.Settings[name]); err != nil {
			at := fmt.Sprintf("connector config %s (--%s)", cc.Path, name)
			if key, ok := tr.From[name]; ok {
				at = cc.At(key)
			}
			errs = append(errs, errors.New(refused(at, ": ", f, tr.Settings[name], err)))
		} else if key, ok := tr.From[name]; ok {
			if c.connectorKeys == nil {
				c.connectorKeys = make(map[string]string)
			}
			c.connectorKeys[name] = cc.At(key)
		}
		set[name] = true
	}
	c.registryPassword, c.registryToken = tr.Registry.Password, tr.Registry.Token
	c.Ignored, c.Unresolved = tr.Ignored, tr.Unresolved
	c.Connector = cc.Form
	return errors.Join(errs...)
}

// The converter keys a connector config may leave to the worker's config,
// which walstream cannot see.
var workerConverters = []string{"key.converter", "value.converter"}

// unsetConverters refuses a connector config's stream whose converters
// nothing set: set are the flags set once every source was read.
func unsetConverters(set map[string]bool, path string) error {
	var errs []error
	for _, k := range workerConverters {
		if !set[debezium.ConnectKeys[k]] {
			errs = append(errs, fmt.Errorf("connector config %s: %s is not set: the connector takes the Kafka Connect worker's, which walstream cannot see; set it in the connector config or with --%s", path, k, debezium.ConnectKeys[k]))
		}
	}
	return errors.Join(errs...)
}

// PrintFromDebezium prints the walstream config file equivalent to the
// connector config at path (walstream init --from-debezium): the settings
// it maps to, by flag name, the router's under outbox:, and the keys it
// ignores as comments. The database password and the TLS key's are left
// out: walstream reads them from $PGPASSWORD, ~/.pgpass or
// --pg-password-file, and $PGSSLPASSWORD, never from a file it prints.
func PrintFromDebezium(w io.Writer, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the connector config: %w", err)
	}
	cc, ok, err := debezium.ReadConnector(path, b)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s is not a Debezium connector config (JSON, properties, or a Strimzi KafkaConnector with connector.class)", path)
	}
	password, sslPassword := cc.Values["database.password"], cc.Values["database.sslpassword"]
	delete(cc.Values, "database.password")
	delete(cc.Values, "database.sslpassword")
	// Secrets in the Kubernetes API or AWS stay there: the printed config
	// says where, and walstream reads them when it runs with the connector
	// config itself.
	tr, err := debezium.Translate(cc, debezium.ResolveLocal)
	if err != nil {
		return err
	}
	router := make(map[string]string)
	for key, f := range debezium.RouterSettings {
		if v, ok := tr.Settings[f]; ok {
			router[key] = v
			delete(tr.Settings, f)
		}
	}
	fmt.Fprintf(w, "# walstream's config for the Debezium connector config %s (%s); walstream run --config this.yaml\n", path, cc.Form)
	if name := cc.Values["name"]; name != "" {
		fmt.Fprintf(w, "# connector %s\n", name)
	}
	for _, name := range slices.Sorted(maps.Keys(tr.Settings)) {
		if refs := debezium.ProviderRefs(tr.Settings[name]); len(refs) > 0 {
			fmt.Fprintf(w, "# %s: from %s, which refers to %s: walstream run --config %s reads it there; or give %s here\n",
				name, tr.From[name], strings.Join(refs, ", "), path, name)
			continue
		}
		fmt.Fprintf(w, "%s: %s\n", name, yamlScalar(tr.Settings[name]))
		if name == "pg-url" && password != "" {
			fmt.Fprintln(w, "# the password is not copied: walstream reads it from $PGPASSWORD, ~/.pgpass or --pg-password-file")
		}
		if name == "pg-url" && sslPassword != "" {
			fmt.Fprintln(w, "# the TLS key's password (database.sslpassword) is not copied: walstream reads it from $PGSSLPASSWORD")
		}
	}
	if tr.Registry.Password != "" {
		fmt.Fprintf(w, "# the schema registry's password is not copied: walstream reads it from --schema-registry-password-file or $%s\n", EnvRegistryPassword)
	}
	if tr.Registry.Token != "" {
		fmt.Fprintf(w, "# the schema registry's token is not copied: walstream reads it from --schema-registry-token-file or $%s\n", EnvRegistryToken)
	}
	fmt.Fprintln(w, "kafka-brokers: ${KAFKA_BROKERS} # the Kafka Connect worker's bootstrap.servers")
	if len(router) > 0 {
		fmt.Fprintln(w, "outbox:")
		for _, key := range slices.Sorted(maps.Keys(router)) {
			fmt.Fprintf(w, "  %s: %s\n", key, yamlScalar(router[key]))
		}
	}
	if len(tr.Ignored) > 0 {
		fmt.Fprintln(w, "# keys walstream has no use for:")
		for _, k := range tr.Ignored {
			fmt.Fprintf(w, "#   %s: %s\n", k.Key, k.Why)
		}
	}
	return nil
}

// yamlScalar writes a value as a YAML scalar that reads back as the same
// string.
func yamlScalar(v string) string {
	if v == "true" || v == "false" {
		return v // a boolean setting, which reads back as its text
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return strconv.Quote(v)
	}
	return strings.TrimSuffix(string(b), "\n")
}
