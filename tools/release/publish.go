package release

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ocilayout "github.com/sigstore/cosign/v2/pkg/oci/layout"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
)

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
// <repo>/<name>:<version>, dated created rather than now so that the
// manifest's digest is the same on every push of one release. It returns
// the reference pushed and the manifest's digest.
func (r ChartRegistry) PushChart(file, repo string, created time.Time) (ref, digest string, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	ch, err := loader.LoadArchive(strings.NewReader(string(data)))
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
