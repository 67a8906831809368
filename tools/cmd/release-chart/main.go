package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"
)

func main() {
	// Helm's loader logs each symbolic link it follows: the chart's
	// files/ link to deploy/prometheus and deploy/grafana.
	log.SetOutput(io.Discard)
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release-chart:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release-chart", flag.ContinueOnError)
	dir := fs.String("chart", "deploy/helm/walstream", "the chart's folder")
	version := fs.String("version", "", "the release's version (v0.1.0): the image's tag, and without the v the chart's version")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the commit's time in seconds since 1970 (SOURCE_DATE_EPOCH)")
	out := fs.String("out", "dist", "the folder to write <name>-<version>.tgz to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-epoch %q: want seconds since 1970: %w", *epoch, err)
	}
	ch, err := loader.Load(*dir)
	if err != nil {
		return fmt.Errorf("loading the chart: %w", err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = strings.TrimPrefix(*version, "v"), *version
	if err := ch.Validate(); err != nil {
		return fmt.Errorf("the chart at version %s: %w", *version, err)
	}
	meta, err := yaml.Marshal(ch.Metadata)
	if err != nil {
		return err
	}
	files := map[string][]byte{"Chart.yaml": meta}
	for _, f := range ch.Raw {
		if f.Name != "Chart.yaml" {
			files[f.Name] = f.Data
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	mtime := time.Unix(secs, 0).UTC()
	for _, n := range names {
		h := &tar.Header{Name: ch.Name() + "/" + n, Mode: 0o644, Size: int64(len(files[n])), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	file := filepath.Join(*out, fmt.Sprintf("%s-%s.tgz", ch.Name(), ch.Metadata.Version))
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return err
	}
	// What helm install reads: the package must load as the chart.
	if got, err := loader.Load(file); err != nil || got.Metadata.Version != ch.Metadata.Version || got.Metadata.AppVersion != *version {
		return fmt.Errorf("%s does not load as chart version %s: %v", file, ch.Metadata.Version, err)
	}
	fmt.Println(file)
	return nil
}
