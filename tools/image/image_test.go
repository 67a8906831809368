package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/walstream/walstream/tools/internal/build"
)

var (
	archive = flag.String("image.archive", "", "check this OCI archive, made by make release, instead of building one")
	version = flag.String("image.version", "v0.0.0-imagetest", "the version the image's binary and labels carry")
	commit  = flag.String("image.commit", "0123456789abcdef0123456789abcdef01234567", "the commit the image's binary and labels carry")
	epoch   = flag.Int64("image.epoch", 1795854600, "the time the image's files carry, seconds since 1970 (SOURCE_DATE_EPOCH)")
)

var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImage builds the image from a walstream binary built as a release
// builds it (static; -trimpath left out, to share the build cache with
// the other tests), for linux/amd64, twice, and compares the digests and
// the archives' checksums; then loads the archive back and checks each
// platform's config and files: the user, entrypoint and labels, the CA
// bundle, the binary for the platform, no shell; and runs the amd64
// binary from the layers for its version. make release runs it on the
// release's own archive of both platforms (-image.archive).
func TestImage(t *testing.T) {
	created := time.Unix(*epoch, 0).UTC()
	platforms := []string{"linux/amd64", "linux/arm64"}
	file := *archive
	if file == "" {
		platforms = platforms[:1]
		file = buildArchive(t, created)
	}
	idx := loadArchive(t, file, created)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range m.Manifests {
		got = append(got, d.Platform.OS+"/"+d.Platform.Architecture)
	}
	if m.MediaType != types.OCIImageIndex || strings.Join(got, " ") != strings.Join(platforms, " ") {
		t.Fatalf("index %s of %v, want an OCI index of %v", m.MediaType, got, platforms)
	}
	checkLabels(t, "index annotations", m.Annotations, created)
	for _, d := range m.Manifests {
		t.Run(d.Platform.OS+"-"+d.Platform.Architecture, func(t *testing.T) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkImage(t, img, d.Platform, created)
		})
	}
}

// buildArchive builds the image of linux/amd64 twice and writes its
// archive; the two must be identical.
func buildArchive(t *testing.T, created time.Time) string {
	dir := t.TempDir()
	bin, err := build.Walstream(context.Background(), build.Root, dir, "linux", "amd64", *version, *commit)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]byte{}
	for _, n := range []string{"LICENSE", "THIRD_PARTY_NOTICES"} {
		if docs[n], err = os.ReadFile(filepath.Join(build.Root, n)); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{Version: *version, Commit: *commit, Created: created, Binaries: map[string]string{"linux/amd64": bin}, Docs: docs}
	var sums [2][32]byte
	var digests [2]v1.Hash
	file := filepath.Join(dir, "oci.tar")
	for i := range 2 {
		idx, err := Build(opts)
		if err != nil {
			t.Fatal(err)
		}
		if digests[i], err = idx.Digest(); err != nil {
			t.Fatal(err)
		}
		if err := WriteArchive(file, idx, Repository+":"+*version, created); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(b)
	}
	if digests[0] != digests[1] || sums[0] != sums[1] {
		t.Fatalf("two builds differ: index %s and %s, archive %x and %x", digests[0], digests[1], sums[0], sums[1])
	}
	t.Logf("index %s, archive sha256 %x, both builds", digests[0], sums[0])
	return file
}

// loadArchive unpacks an OCI archive and returns the index its index.json
// names with the version as ref name.
func loadArchive(t *testing.T, file string, created time.Time) v1.ImageIndex {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s dated %v, want the commit's time", h.Name, h.ModTime)
		}
	}
	lp, err := ReadArchive(file, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if ref := Repository + ":" + *version; len(tm.Manifests) != 1 || tm.Manifests[0].Annotations[RefName] != ref || tm.Manifests[0].Annotations[ContainerdName] != ref {
		t.Fatalf("index.json %+v: want one index named %s", tm.Manifests, ref)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func checkLabels(t *testing.T, what string, got map[string]string, created time.Time) {
	t.Helper()
	want := map[string]string{
		"org.opencontainers.image.version":  *version,
		"org.opencontainers.image.revision": *commit,
		"org.opencontainers.image.source":   "https://github.com/walstream/walstream",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

func checkImage(t *testing.T, img v1.Image, p *v1.Platform, created time.Time) {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("config for %s/%s, listed as %s/%s", cf.OS, cf.Architecture, p.OS, p.Architecture)
	}
	if c.User != "65532:65532" || strings.Join(c.Entrypoint, " ") != "/usr/local/bin/walstream" || strings.Join(c.Cmd, " ") != "run" {
		t.Errorf("user %q, entrypoint %q, cmd %q: want 65532:65532 running /usr/local/bin/walstream run", c.User, c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["9187/tcp"]; !ok || !contains(c.Env, "WALSTREAM_HTTP_ADDR=0.0.0.0:9187") || !contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("ports %v, env %v: want 9187/tcp, walstream listening on every interface, SSL_CERT_FILE", c.ExposedPorts, c.Env)
	}
	if !cf.Created.Equal(created) {
		t.Errorf("created %v, want the commit's time", cf.Created)
	}
	checkLabels(t, "labels", c.Labels, created)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	checkLabels(t, "manifest annotations", m.Annotations, created)

	files := readFiles(t, img)
	pool := x509.NewCertPool()
	if ca := files["etc/ssl/certs/ca-certificates.crt"]; ca == nil || !pool.AppendCertsFromPEM(ca.data) || bytes.Count(ca.data, []byte("BEGIN CERTIFICATE")) < 100 {
		t.Errorf("no CA bundle of at least 100 certificates at /etc/ssl/certs/ca-certificates.crt")
	}
	if pw := files["etc/passwd"]; pw == nil || !strings.Contains(string(pw.data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532")
	}
	if tmp := files["tmp"]; tmp == nil || tmp.h.Mode != 0o1777 {
		t.Errorf("/tmp missing or not 1777: %+v", tmp)
	}
	for _, sh := range []string{"bin/sh", "bin/bash", "usr/bin/sh", "bin/busybox"} {
		if files[sh] != nil {
			t.Errorf("the image has a shell: /%s", sh)
		}
	}
	for _, doc := range []string{"LICENSE", "THIRD_PARTY_NOTICES"} {
		if f := files["usr/share/doc/walstream/"+doc]; f == nil || len(f.data) < 1000 {
			t.Errorf("no /usr/share/doc/walstream/%s", doc)
		}
	}
	bin := files["usr/local/bin/walstream"]
	if bin == nil || bin.h.Mode&0o111 == 0 || bin.h.Uid != 0 {
		t.Fatalf("no executable /usr/local/bin/walstream owned by root: %+v", bin)
	}
	e, err := elf.NewFile(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatal(err)
	}
	if e.Machine != machines[p.Architecture] {
		t.Errorf("the %s image's binary is for %v", p.Architecture, e.Machine)
	}
	// Static: the image has no dynamic loader and no libc.
	if libs, err := e.ImportedLibraries(); err != nil || len(libs) > 0 || e.Section(".interp") != nil {
		t.Errorf("the %s binary is linked dynamically: libraries %v (%v)", p.Architecture, libs, err)
	}
	if p.Architecture != "amd64" {
		return
	}
	// This machine runs the amd64 binary as the container would.
	path := filepath.Join(t.TempDir(), "walstream")
	if err := os.WriteFile(path, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version").CombinedOutput()
	if want := "walstream " + *version + " (commit " + *commit + ")\n"; err != nil || string(out) != want {
		t.Errorf("walstream version from the image: %q, %v; want %q", out, err, want)
	}
}

type entry struct {
	h    *tar.Header
	data []byte
}

// readFiles reads the image's filesystem, its layers applied in order.
func readFiles(t *testing.T, img v1.Image) map[string]*entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want the base and walstream's", len(layers))
	}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer of media type %s, want %s", mt, types.OCILayer)
		}
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := make(map[string]*entry)
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		} else if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = &entry{h, b}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestDockerArchive: the archive docker load reads holds the platform's
// image under the release's name.
func TestDockerArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "walstream")
	// An ELF for the layer; its contents do not matter here.
	if err := os.WriteFile(bin, []byte("\x7fELF not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	idx, err := Build(Options{Version: *version, Commit: *commit, Created: time.Unix(1, 0), Binaries: map[string]string{"linux/amd64": bin, "linux/arm64": bin}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "docker.tar")
	ref := Repository + ":" + *version
	if err := WriteDockerArchive(file, idx, "linux/arm64", ref); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Platform(idx, "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	gotID, _ := img.ConfigName()
	wantID, _ := want.ConfigName()
	if gotID != wantID {
		t.Errorf("docker archive holds config %s, want the arm64 image's %s", gotID, wantID)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(file) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].RepoTags) != 1 || m[0].RepoTags[0] != ref {
		t.Errorf("docker archive manifest %+v, want one image tagged %s", m, ref)
	}
}
