// Package config reads walstream's settings and returns them validated,
// one Config (a pipeline.Config, built) for each stream.
//
// It owns the one table of settings (Config.Settings, config.go): each a
// flag, a WALSTREAM_ environment variable (EnvName) and a key of the YAML
// config file at once, bound to a pipeline.Config field or parsed into one
// by build, its field column naming the flag in pipeline.Config.Validate's
// errors; the outbox router's settings beside it (router.go, named by
// debezium.RouterSettings). It owns the config file (file.go): ${VAR}
// expansion, the streams: list and each stream's own settings over the top
// level's, outbox: and tables:, and a Debezium connector config in its
// place or under a stream's connector: (connector.go), which
// debezium.Translate maps onto the settings (PrintFromDebezium prints the
// config file equivalent to one). And it owns what a command reads
// (command.go): a Command's own flags, the shared settings it Uses and the
// connections it Needs, read from the command line, the environment and
// the file in that order (Parse, ParseStreams), its --help, and the
// wording of a bad flag.
//
// A fleet's settings are the process's: build resolves --fleet into the
// group's id (pipeline.Config.Fleet, group.Settings), and ParseStreams
// refuses the streams of one file that would join different groups, or
// that pipeline.CheckFleet refuses.
//
// cmd/walstream defines the commands, wires what they run and prints;
// errors met at run time get their flags there.
package config
