package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/walstream/walstream/tools/image"
	"github.com/walstream/walstream/tools/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-sign:", err)
		os.Exit(1)
	}
}

// tools is a flag that may be given more than once.
type tools []string

func (t *tools) String() string     { return strings.Join(*t, ",") }
func (t *tools) Set(s string) error { *t = append(*t, s); return nil }

func run(args []string) error {
	fs := flag.NewFlagSet("release-sign", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "the release's folder")
	version := fs.String("version", "", "the release's version (v0.1.0)")
	commit := fs.String("commit", "", "the commit the release is built from")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the commit's time in seconds since 1970 (SOURCE_DATE_EPOCH)")
	repo := fs.String("repository", image.Repository, "the image's name, without tag")
	builder := fs.String("builder", os.Getenv("SLSA_BUILDER_ID"), "the provenance's builder id (SLSA_BUILDER_ID): who ran the build")
	check := fs.Bool("check-key", false, "only load the key, as make release does before it builds")
	var used tools
	fs.Var(&used, "tool", "a pinned module@version the build ran, for the provenance; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	keyFile := os.Getenv("COSIGN_KEY")
	if keyFile == "" {
		return errors.New("no signing key: COSIGN_KEY names the file of a cosign private key (cosign generate-key-pair), COSIGN_PASSWORD holds its password")
	}
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("reading the signing key: %w", err)
	}
	key, err := release.LoadKey(pem, []byte(os.Getenv("COSIGN_PASSWORD")))
	if err != nil {
		return fmt.Errorf("%s: %w", keyFile, err)
	}
	if *check {
		return nil
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-epoch %q: want seconds since 1970: %w", *epoch, err)
	}
	if *builder == "" {
		// Not a builder a policy would trust: a person's make release.
		*builder = image.Source + "/blob/" + *commit + "/scripts/release.sh"
	}
	o := release.Options{
		Dist:       *dist,
		Version:    *version,
		Repository: *repo,
		Created:    time.Unix(secs, 0).UTC(),
		Key:        key,
		Provenance: release.Provenance{
			BuilderID: *builder,
			Source:    image.Source,
			Commit:    *commit,
			Version:   *version,
			Epoch:     secs,
			Toolchain: runtime.Version(),
			Tools:     used,
		},
	}
	if err := release.SignRelease(o); err != nil {
		return err
	}
	fmt.Printf("%s/%s signed with the key in %s\n", *dist, release.Sums, keyFile)
	return nil
}
