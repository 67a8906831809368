package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocilayout "github.com/sigstore/cosign/v2/pkg/oci/layout"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"

	"github.com/walstream/walstream/tools/image"
)

// Publisher publishes a signed release from its folder: the image with
// its signature and attestations, and the chart.
type Publisher struct {
	// Dist is the release's folder, Version its version (v0.1.0).
	Dist, Version string
	// Repository is the image's name without tag
	// (ghcr.io/walstream/walstream); the image is pushed tagged Version.
	Repository string
	// Charts is the OCI repository of charts (oci://ghcr.io/walstream/charts).
	Charts string
	// PlainHTTP pushes without TLS, to a registry on loopback.
	PlainHTTP bool
	// Credentials is the Docker config file the chart is pushed with;
	// the image is pushed with Docker's own (DOCKER_CONFIG's folder, or
	// ~/.docker), the same file once docker login has run. Empty, the
	// chart is pushed with Helm's credentials.
	Credentials string
}

// Published is what Publish pushed.
type Published struct {
	Image       name.Tag
	ImageDigest v1.Hash
	Chart       string
	ChartDigest string
}

// Publish pushes the signed image (walstream_<v>_signed_oci.tar) and the
// chart (walstream-<v>.tgz) of the release.
func (p Publisher) Publish() (Published, error) {
	var res Published
	v := strings.TrimPrefix(p.Version, "v")
	var opts []name.Option
	if p.PlainHTTP {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(p.Repository+":"+p.Version, opts...)
	if err != nil {
		return res, fmt.Errorf("naming the image %s:%s: %w", p.Repository, p.Version, err)
	}
	dir, err := os.MkdirTemp("", "walstream-publish-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	if _, err := image.ReadArchive(filepath.Join(p.Dist, "walstream_"+v+SignedSuffix), dir); err != nil {
		return res, err
	}
	res.Image = tag
	if res.ImageDigest, err = PushImage(dir, tag, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return res, err
	}
	r := ChartRegistry{Credentials: p.Credentials, PlainHTTP: p.PlainHTTP}
	res.Chart, res.ChartDigest, err = r.PushChart(filepath.Join(p.Dist, "walstream-"+v+".tgz"), p.Charts)
	return res, err
}

// PushImage pushes the signed image in the OCI layout at dir, as
// WriteSignedArchive writes it, to ref (ghcr.io/walstream/walstream:v0.1.0)
// as cosign load does: the index and every platform's image, tagged ref,
// and beside them its signatures and attestations under cosign's tags
// (sha256-<digest>.sig and .att), where cosign verify and
// verify-attestation look. It returns the index's digest.
func PushImage(dir string, ref name.Tag, opts ...remote.Option) (v1.Hash, error) {
	sii, err := ocilayout.SignedImageIndex(dir)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("reading the signed image in %s: %w", dir, err)
	}
	idx, err := sii.SignedImageIndex(v1.Hash{})
	if err != nil || idx == nil {
		return v1.Hash{}, fmt.Errorf("%s holds no image index as cosign save writes it (%v)", dir, err)
	}
	h, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := ociremote.WriteSignedImageIndexImages(ref, sii, ociremote.WithRemoteOptions(opts...)); err != nil {
		return v1.Hash{}, fmt.Errorf("pushing %s@%s: %w", ref, h, err)
	}
	return h, nil
}

// ChartRegistry is what PushChart pushes with: TLS unless PlainHTTP (a
// registry on loopback), with the credentials of a Docker config file
// (docker login's ~/.docker/config.json) when Credentials is set.
type ChartRegistry struct {
	Credentials string
	PlainHTTP   bool
}

func (r ChartRegistry) client() (*registry.Client, error) {
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if r.Credentials != "" {
		opts = append(opts, registry.ClientOptCredentialsFile(r.Credentials))
	}
	if r.PlainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	return registry.NewClient(opts...)
}

// PushChart pushes the packaged chart at file to repo
// (oci://ghcr.io/walstream/charts) as helm push does, as
// <repo>/<name>:<version>, dated as the chart's files are (release-chart
// dates them the commit's time) rather than now, so that the manifest's
// digest is the same on every push of one release. It returns the
// reference pushed and the manifest's digest.
func (r ChartRegistry) PushChart(file, repo string) (ref, digest string, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", "", fmt.Errorf("reading the chart %s: %w", file, err)
	}
	created, err := packagedAt(data)
	if err != nil {
		return "", "", fmt.Errorf("reading the chart %s: %w", file, err)
	}
	c, err := r.client()
	if err != nil {
		return "", "", err
	}
	ref = strings.TrimPrefix(repo, "oci://") + "/" + ch.Name() + ":" + ch.Metadata.Version
	res, err := c.Push(data, ref, registry.PushOptCreationTime(created.UTC().Format(time.RFC3339)))
	if err != nil {
		return "", "", fmt.Errorf("pushing the chart %s to %s: %w", file, ref, err)
	}
	return ref, res.Manifest.Digest, nil
}

// packagedAt returns the time of the first file of a packaged chart.
func packagedAt(tgz []byte) (time.Time, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return time.Time{}, err
	}
	h, err := tar.NewReader(zr).Next()
	if err != nil {
		return time.Time{}, err
	}
	return h.ModTime, nil
}

// PullChart pulls the chart at ref (host/path/name@sha256:... or :version)
// as helm pull does and returns the packaged chart and the manifest's
// digest.
func (r ChartRegistry) PullChart(ref string) (data []byte, digest string, err error) {
	c, err := r.client()
	if err != nil {
		return nil, "", err
	}
	res, err := c.Pull(ref)
	if err != nil {
		return nil, "", fmt.Errorf("pulling the chart %s: %w", ref, err)
	}
	return res.Chart.Data, res.Manifest.Digest, nil
}
