package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/walstream/walstream/tools/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release-image", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "goreleaser's output folder, holding artifacts.json")
	version := fs.String("version", "", "the release's version, as walstream version prints it (v0.1.0)")
	commit := fs.String("commit", "", "the commit the release is built from")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the commit's time in seconds since 1970 (SOURCE_DATE_EPOCH)")
	repo := fs.String("repository", image.Repository, "the image's name, without tag")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "the platforms of the index")
	root := fs.String("root", ".", "the repository, holding LICENSE and THIRD_PARTY_NOTICES")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-epoch %q: want seconds since 1970: %w", *epoch, err)
	}
	created := time.Unix(secs, 0).UTC()
	bins, err := binaries(*dist, strings.Split(*platforms, ","))
	if err != nil {
		return err
	}
	docs := make(map[string][]byte)
	for _, n := range []string{"LICENSE", "THIRD_PARTY_NOTICES"} {
		if docs[n], err = os.ReadFile(filepath.Join(*root, n)); err != nil {
			return err
		}
	}
	idx, err := image.Build(image.Options{Version: *version, Commit: *commit, Created: created, Binaries: bins, Docs: docs})
	if err != nil {
		return err
	}
	ref := *repo + ":" + *version
	file := filepath.Join(*dist, "walstream_"+strings.TrimPrefix(*version, "v")+"_oci.tar")
	if err := image.WriteArchive(file, idx, ref, created); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	fmt.Println(file, ref)
	for p := range bins {
		file := filepath.Join(*dist, "walstream_"+strings.TrimPrefix(*version, "v")+"_"+strings.ReplaceAll(p, "/", "_")+".docker.tar")
		if err := image.WriteDockerArchive(file, idx, p, ref); err != nil {
			return fmt.Errorf("writing %s: %w", file, err)
		}
		fmt.Println(file, ref, p)
	}
	return nil
}

// binaries reads which binary goreleaser built for each platform.
func binaries(dist string, platforms []string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dist, "artifacts.json"))
	if err != nil {
		return nil, fmt.Errorf("reading goreleaser's list of artifacts: %w", err)
	}
	var artifacts []struct {
		Type, Path, Goos, Goarch string
	}
	if err := json.Unmarshal(b, &artifacts); err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Join(dist, "artifacts.json"), err)
	}
	bins := make(map[string]string)
	for _, a := range artifacts {
		if a.Type == "Binary" {
			bins[a.Goos+"/"+a.Goarch] = a.Path
		}
	}
	out := make(map[string]string)
	for _, p := range platforms {
		if bins[p] == "" {
			return nil, fmt.Errorf("%s/artifacts.json names no binary for %s", dist, p)
		}
		out[p] = bins[p]
	}
	return out, nil
}
