package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/walstream/walstream/tools/image"
	"github.com/walstream/walstream/tools/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-publish:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release-publish", flag.ContinueOnError)
	p := release.Publisher{}
	fs.StringVar(&p.Dist, "dist", "dist", "the release's folder, signed by release-sign")
	fs.StringVar(&p.Version, "version", "", "the release's version (v0.1.0), the image's tag")
	fs.StringVar(&p.Repository, "repository", image.Repository, "the image's name, without tag")
	fs.StringVar(&p.Charts, "charts", "oci://ghcr.io/walstream/charts", "the OCI repository of the chart")
	// Where docker login writes, which the image's push reads.
	docker := os.Getenv("DOCKER_CONFIG")
	if docker == "" {
		home, _ := os.UserHomeDir()
		docker = filepath.Join(home, ".docker")
	}
	fs.StringVar(&p.Credentials, "credentials", filepath.Join(docker, "config.json"), "the Docker config file with the chart registry's credentials (docker login)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	res, err := p.Publish()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n%s@%s\n", res.Image, res.ImageDigest, res.Chart, res.ChartDigest)
	return nil
}
