package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/walstream/walstream/debezium"
	"github.com/walstream/walstream/kafka"
	"github.com/walstream/walstream/pipeline"
)

// Command is a subcommand's settings: the flags it adds, the shared
// settings it uses (listed by its --help) and the connections it needs.
type Command struct {
	// Name is the command's, as in walstream <name>; About is what its
	// --help says it does.
	Name, About string
	// Flags defines the command's own flags.
	Flags func(*flag.FlagSet)
	// Uses lists the shared settings the command reads; nil: all of them.
	// The others are still accepted, so that one config file or
	// environment serves every command.
	Uses []string
	// Needs says, once the flags are parsed, which connections the command
	// opens, so that their settings are required.
	Needs func() (pg, kafka bool)
	// Secrets says, once the flags are parsed, which config provider
	// references of a Debezium connector config the command reads; nil:
	// all of them, as run does. Those left are in Config.Unresolved.
	Secrets func() debezium.Resolving
}

// Run is `walstream run`, which reads every setting and runs every
// stream a config file's streams: list names (see ParseStreams).
var Run = Command{Name: "run", About: "Streams an outbox table from a Postgres logical replication slot into Kafka, exactly once; " +
	"several streams at once when the config file lists them under streams: (see docs/configuration.md, Many streams in one process).",
	Needs: func() (pg, kafka bool) { return true, true }}

// Parse reads a command's settings for one stream: flags, then the
// environment, then the config file. --help prints to stdout and returns
// flag.ErrHelp; a bad flag is one error line. A config file with a
// streams: list needs --stream to name the one.
func Parse(cmd Command, args []string, stdout io.Writer) (*Config, error) {
	cs, err := ParseStreams(cmd, args, stdout)
	if err == nil && len(cs) > 1 {
		return nil, fmt.Errorf("config file %s lists %d streams and walstream %s takes one: name it with --stream (%s)", cs[0].ConfigFile, len(cs), cmd.Name, streamNames(cs))
	}
	if len(cs) == 0 {
		return nil, err
	}
	return cs[0], err
}

// ParseStreams reads a command's settings for every stream the config
// file lists under streams:, or the one stream of the flags, the
// environment and a file without such a list. With a list, --stream
// names the one stream to read; the flags and the environment set every
// stream's settings, over the file's top level, and none of a stream's
// own entry (see docs/configuration.md, Many streams in one process).
func ParseStreams(cmd Command, args []string, stdout io.Writer) ([]*Config, error) {
	c, fs, set, err := parseFlags(cmd, args, stdout)
	if err != nil {
		return nil, err
	}
	if c.ConfigFile == "" {
		return []*Config{c}, c.finish(cmd)
	}
	f, err := readConfigFile(c.ConfigFile)
	if err != nil {
		return nil, err
	}
	if f.streams == nil {
		if err := c.applyFile(fs, set, f, -1); err != nil {
			return nil, err
		}
		return []*Config{c}, c.finish(cmd)
	}
	var errs []error
	for _, name := range streamOnly {
		if set[name] && name != "stream" {
			errs = append(errs, fmt.Errorf("--%s ($%s) names one stream, and config file %s lists streams: set it in the stream's entry", name, EnvName(name), f.path))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pick := ""
	if set["stream"] {
		pick = c.Stream
	}
	var all, picked []*Config
	for i := range f.streams {
		// Each stream reads the command line and the environment anew:
		// flags fill the Config they are bound to.
		sc, sfs, sset, _ := parseFlags(cmd, args, io.Discard)
		if sset["stream"] {
			sc.Stream = ""
			delete(sset, "stream")
		}
		sc.listed = true
		err := sc.applyFile(sfs, sset, f, i)
		if err == nil {
			err = sc.finish(cmd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %d of %s (streams[%d]):\n%w", i+1, f.path, i, err))
		}
		all = append(all, sc)
		if pick == "" || sc.Stream == pick {
			picked = append(picked, sc)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("--stream %q: config file %s has no such stream (%s)", pick, f.path, streamNames(all))
	}
	// --fleet=auto (the process's, so every stream's) shares a list of
	// streams that write to one Kafka cluster, where the fleet's group
	// is; --fleet=on a list of several is refused by CheckFleet.
	ks := make([]kafka.Settings, len(all))
	for i, sc := range all {
		ks[i] = sc.Kafka
	}
	if clusters := kafka.Clusters(ks); all[0].FleetMembership == fleetAuto && slices.ContainsFunc(clusters, func(c string) bool { return c != clusters[0] }) {
		for _, sc := range all {
			sc.Fleet.Group = ""
		}
	}
	var cfgs []pipeline.Config
	for _, sc := range all {
		cfgs = append(cfgs, sc.Config)
		if g, first := sc.Fleet.Group, all[0].Fleet.Group; g != first {
			errs = append(errs, fmt.Errorf("streams %s and %s would join different fleet groups, %s and %s, derived from their checkpoint topics: "+
				"give them one checkpoint topic, or name the group with --fleet-group ($%s)", all[0].Stream, sc.Stream, first, g, EnvName("fleet-group")))
		}
	}
	errs = append(errs, pipeline.CheckFleet(cfgs))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("config file %s: %w", f.path, err)
	}
	return picked, nil
}

// streamNames lists the streams' names.
func streamNames(cs []*Config) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Stream
	}
	return strings.Join(names, ", ")
}

// parseFlags reads a command's flags, then fills every flag not given from
// its environment variable; set are the flags either gave.
func parseFlags(cmd Command, args []string, stdout io.Writer) (c *Config, fs *flag.FlagSet, set map[string]bool, err error) {
	c = new(Config)
	fs = flag.NewFlagSet("walstream "+cmd.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.Flags(fs)
	own := flag.NewFlagSet("", flag.ContinueOnError)
	if cmd.Flags != nil {
		cmd.Flags(own)
		own.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs, cmd, own)
			return nil, nil, nil, flag.ErrHelp
		}
		return nil, nil, nil, fmt.Errorf("%s; walstream %s --help lists the flags", flagError(fs, err), cmd.Name)
	}
	if fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("unexpected argument %q; walstream %s --help lists the flags", fs.Arg(0), cmd.Name)
	}
	if cmd.Secrets != nil {
		c.resolving = cmd.Secrets()
	}
	set = make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, errors.New(refused("$"+EnvName(f.Name), "=", f, v, err)))
			}
			set[f.Name] = true
		}
	})
	return c, fs, set, errors.Join(errs...)
}

// finish parses and checks the settings once every source was read, and
// requires the connections the command needs.
func (c *Config) finish(cmd Command) error {
	errs := []error{c.build()}
	needPG, needKafka := cmd.Needs()
	if needPG && c.PGURL == "" {
		errs = append([]error{fmt.Errorf("--pg-url ($%s): is required", EnvName("pg-url"))}, errs...)
	}
	if needKafka && len(c.Kafka.Brokers) == 0 {
		errs = append([]error{fmt.Errorf("--kafka-brokers ($%s): is required", EnvName("kafka-brokers"))}, errs...)
	}
	return errors.Join(errs...)
}

// printUsage lists the command's own flags and the shared settings it uses.
func printUsage(w io.Writer, fs *flag.FlagSet, cmd Command, own *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: walstream %s [flags]\n\n%s\nEvery flag can also be set by the environment variable named after it.\n\n", cmd.Name, cmd.About)
	list := flag.NewFlagSet("", flag.ContinueOnError)
	list.SetOutput(w)
	fs.VisitAll(func(f *flag.Flag) {
		if cmd.Uses != nil && !slices.Contains(cmd.Uses, f.Name) && own.Lookup(f.Name) == nil {
			return
		}
		list.Var(f.Value, f.Name, f.Usage)
		list.Lookup(f.Name).DefValue = f.DefValue
	})
	list.PrintDefaults()
}

// flagMessage reads the flag package's parse errors.
var flagMessage = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-(\S+): (.*)$`)

// flagError turns the flag package's error into one line that names the
// flag as the help does and says what it expects.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("unknown flag --%s", strings.TrimPrefix(name, "-"))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimPrefix(name, "-"))
	}
	if m := flagMessage.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			return refused("--"+m[2], " ", f, m[1], errors.New(m[3]))
		}
	}
	return msg
}

// refused words the error of flag f refusing value, after what names
// where the value was given (--name, $NAME, a config file's key) and sep:
// the value quoted, then what the flag takes. A flag parsed when set
// (parsed) may hold a credential, such as a Kafka Connect URL's user and
// password: its value is left out, since its parser's errors quote what
// they can of it, redacted.
func refused(what, sep string, f *flag.Flag, value string, err error) string {
	if _, ok := f.Value.(*parsed); ok {
		return fmt.Sprintf("%s: %v", what, err)
	}
	return fmt.Sprintf("%s%s%q: %s", what, sep, value, expected(f, err))
}

// expected says what a flag takes, for an error setting it: the flag
// package only says "parse error".
func expected(f *flag.Flag, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "want a duration like 5ms, 10s or 1m"
	case bool:
		want = "want true or false"
	case int:
		want = "want a whole number like 1000"
	default:
		return err.Error()
	}
	if strings.Contains(err.Error(), "out of range") {
		want += " (out of range)"
	}
	return want
}

// Settings each command reads (Command.Uses); run reads them all.
var (
	InitSettings = []string{"config", "pg-url", "pg-password-file", "pg-aws-iam-auth", "pg-aws-region", "slot", "publication", "table",
		"event-id-column", "event-key-column", "payload-column", "route-by-column", "timestamp-column",
		"additional-placement", "additional-error-on-missing", "failover-slot",
		"stream", "kafka-brokers", "checkpoint-topic", "transactional-id", "on-error", "dlq-topic", "topic-creation", "topic-template",
		"fleet", "fleet-group"}
	StatusSettings = slices.Concat([]string{"config", "pg-url", "pg-password-file", "pg-aws-iam-auth", "pg-aws-region", "slot", "publication", "table", "stream", "checkpoint-topic",
		"checkpoint-key", "transactional-id", "on-error", "dlq-topic"}, kafkaConnection, []string{"blocking-query-text", "from-debezium-offset", "debezium-connector",
		"fleet", "fleet-group"})
	// diff reads the Kafka connection only.
	DiffSettings = slices.Concat([]string{"config"}, kafkaConnection)
	// reemit reads the stream's Postgres, tables, mapping of the event id,
	// and checkpoint.
	ReemitSettings = slices.Concat([]string{"config", "pg-url", "pg-password-file", "pg-aws-iam-auth", "pg-aws-region", "slot", "publication", "table", "event-id-column",
		"stream", "checkpoint-topic", "checkpoint-key", "transactional-id"}, kafkaConnection)
	// kafkaConnection are the settings of a connection to Kafka.
	kafkaConnection = []string{"kafka-brokers", "kafka-tls", "kafka-tls-ca-file", "kafka-tls-cert-file", "kafka-tls-key-file", "kafka-tls-server-name",
		"kafka-sasl-mechanism", "kafka-sasl-user", "kafka-sasl-password-file", "kafka-oauth-token-file", "kafka-oauth-token-url",
		"kafka-oauth-client-id", "kafka-oauth-client-secret-file", "kafka-oauth-scope"}
)
