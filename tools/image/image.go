package image

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Where things are in the image, and who runs it. The user is distroless's
// nonroot, which deploy/ and the chart name by number.
const (
	Binary     = "/usr/local/bin/walstream"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
	DocDir     = "/usr/share/doc/walstream"
	UID        = 65532
	User       = "65532:65532"
	HTTPPort   = "9187/tcp"
	Repository = "ghcr.io/walstream/walstream"
	Source     = "https://github.com/walstream/walstream"
)

// Env returns the environment the image sets.
func Env() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"SSL_CERT_FILE=" + CABundle,
		// In a container loopback is the container's own: /metrics,
		// /healthz and /readyz listen on every interface of it.
		"WALSTREAM_HTTP_ADDR=0.0.0.0:9187",
	}
}

// Options are what an image is made of.
type Options struct {
	// Version and Commit stamp the labels, as the binaries are stamped.
	Version, Commit string
	// Created is the time every file and the image's config carry: the
	// commit's (SOURCE_DATE_EPOCH), so that two builds are identical.
	Created time.Time
	// Binaries maps a platform ("linux/amd64") to its walstream binary.
	Binaries map[string]string
	// Docs are files put in DocDir by name: LICENSE, THIRD_PARTY_NOTICES.
	Docs map[string][]byte
}

// Labels are the image's OCI labels, also set as annotations of its
// manifests and index.
func (o Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "walstream",
		"org.opencontainers.image.description":   "Streams a transactional outbox out of PostgreSQL into Kafka, exactly once",
		"org.opencontainers.image.version":       o.Version,
		"org.opencontainers.image.revision":      o.Commit,
		"org.opencontainers.image.source":        Source,
		"org.opencontainers.image.url":           Source,
		"org.opencontainers.image.documentation": Source + "/blob/" + o.Commit + "/docs/getting-started.md",
		"org.opencontainers.image.licenses":      "Apache-2.0",
		"org.opencontainers.image.created":       o.Created.UTC().Format(time.RFC3339),
	}
}

// Build returns the index of one image per platform in o.Binaries.
func Build(o Options) (v1.ImageIndex, error) {
	if o.Version == "" || o.Commit == "" || o.Created.IsZero() || len(o.Binaries) == 0 {
		return nil, fmt.Errorf("building the image: version %q, commit %q, created %v and %d binaries: all are needed", o.Version, o.Commit, o.Created, len(o.Binaries))
	}
	base, err := layer(baseFiles(), o.Created)
	if err != nil {
		return nil, fmt.Errorf("building the base layer: %w", err)
	}
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	labels := o.Labels()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		osName, arch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("building the image: platform %q is not os/arch", p)
		}
		bin, err := os.ReadFile(o.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("reading the %s binary: %w", p, err)
		}
		app, err := layer(appFiles(o, bin), o.Created)
		if err != nil {
			return nil, fmt.Errorf("building the %s layer: %w", p, err)
		}
		img, err := platformImage(o, labels, osName, arch, base, app)
		if err != nil {
			return nil, fmt.Errorf("building the %s image: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

func platformImage(o Options, labels map[string]string, osName, arch string, base, app v1.Layer) (v1.Image, error) {
	created := v1.Time{Time: o.Created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "walstream base: nonroot user, CA certificates, /tmp", Comment: "golang.org/x/crypto/x509roots/fallback"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "walstream " + o.Version + " " + osName + "/" + arch}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = osName, arch, created
	cf.Author = ""
	cf.Config = v1.Config{
		User:         User,
		Entrypoint:   []string{Binary},
		Cmd:          []string{"run"},
		WorkingDir:   "/home/nonroot",
		Env:          Env(),
		ExposedPorts: map[string]struct{}{HTTPPort: {}},
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// file is one entry of a layer.
type file struct {
	name     string
	mode     int64
	uid      int
	dir      bool
	contents []byte
}

func baseFiles() []file {
	return []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, contents: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/group", mode: 0o644, contents: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, contents: caBundle()},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: UID, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/share/", mode: 0o755, dir: true},
		{name: "usr/share/doc/", mode: 0o755, dir: true},
		{name: "usr/share/doc/ca-certificates/", mode: 0o755, dir: true},
		{name: "usr/share/doc/ca-certificates/README", mode: 0o644, contents: []byte(caReadme)},
	}
}

const caReadme = `/etc/ssl/certs/ca-certificates.crt holds the root certificates of Mozilla's
CA Certificate Program as golang.org/x/crypto/x509roots/fallback ships them
(the version is in walstream's tools/go.mod), without those Mozilla limits
by date or name, which a PEM bundle cannot express. Mozilla's list is under
the Mozilla Public License 2.0: https://www.mozilla.org/MPL/2.0/
`

// caBundle is the PEM bundle of every root the fallback bundle holds
// without a constraint.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

func appFiles(o Options, bin []byte) []file {
	files := []file{
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(Binary, "/"), mode: 0o755, contents: bin},
		{name: "usr/share/", mode: 0o755, dir: true},
		{name: "usr/share/doc/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(DocDir, "/") + "/", mode: 0o755, dir: true},
	}
	names := make([]string, 0, len(o.Docs))
	for n := range o.Docs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, file{name: path.Join(strings.TrimPrefix(DocDir, "/"), n), mode: 0o644, contents: o.Docs[n]})
	}
	return files
}

// layer writes files as an uncompressed tar, every entry dated created,
// and makes it an OCI layer, gzip-compressed by go-containerregistry (no
// time in the gzip header).
func layer(files []file, created time.Time) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created.UTC().Truncate(time.Second), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// The annotations that name an image in an OCI layout: the OCI one, which
// podman load takes as the image's name and skopeo as the archive's
// reference (oci-archive:file:name), and containerd's, which docker load
// reads.
const (
	RefName        = "org.opencontainers.image.ref.name"
	ContainerdName = "io.containerd.image.name"
)

// WriteArchive writes idx as an OCI image layout in a tar archive at file,
// named ref (ghcr.io/walstream/walstream:v0.1.0): what `podman load` and
// `skopeo copy --all oci-archive:` read. Every entry is dated created.
func WriteArchive(file string, idx v1.ImageIndex, ref string, created time.Time) error {
	dir, err := os.MkdirTemp("", "walstream-oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefName: ref, ContainerdName: ref})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	return TarLayout(file, dir, created)
}

// TarLayout writes the OCI layout in dir to a tar archive at file, in name
// order, owned by root and dated created: the same layout gives the same
// bytes.
func TarLayout(file, dir string, created time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			names = append(names, p)
		}
		return err
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	for _, p := range names {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: created.UTC().Truncate(time.Second), Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ReadArchive unpacks the OCI archive at file, as WriteArchive or
// TarLayout writes it, into dir and returns the layout.
func ReadArchive(file, dir string) (layout.Path, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("reading %s: %w", file, err)
		}
		if !filepath.IsLocal(h.Name) {
			return "", fmt.Errorf("reading %s: entry %q is outside the layout", file, h.Name)
		}
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		default:
			err = fmt.Errorf("entry %q of type %q: an OCI layout holds files and folders only", h.Name, h.Typeflag)
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", file, err)
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	return p, nil
}

// WriteDockerArchive writes the image of one platform of idx, named ref,
// in the format of `docker save`, which `docker load` and `podman load`
// read on any version.
func WriteDockerArchive(file string, idx v1.ImageIndex, platform, ref string) error {
	img, err := Platform(idx, platform)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("naming the image %q: %w", ref, err)
	}
	return tarball.WriteToFile(file, tag, img)
}

// Platform returns the image of idx for platform ("linux/amd64").
func Platform(idx v1.ImageIndex, platform string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS+"/"+d.Platform.Architecture == platform {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("the index has no image for %s", platform)
}
