package release

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sirupsen/logrus"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/walstream/walstream/tools/chart"
	"github.com/walstream/walstream/tools/image"
	"github.com/walstream/walstream/tools/internal/build"
)

// startRegistry starts an OCI registry on loopback, CNCF Distribution's
// (distribution/v3, the registry the OCI distribution spec grew from), in
// this process with in-memory storage, and returns its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	// The registry logs every 404 a push's HEAD requests meet, as errors,
	// to logrus's standard logger; what fails reaches the client anyway.
	logrus.SetOutput(io.Discard)
	cfg := &configuration.Configuration{Storage: configuration.Storage{"inmemory": configuration.Parameters{}}}
	cfg.HTTP.Secret = "walstream-test"
	srv := httptest.NewServer(handlers.NewApp(context.Background(), cfg))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestPublish pushes a signed release's image and chart to a registry as
// the release workflow does (release-publish): the index of both
// platforms with its signature and attestations, as cosign load does, and
// the chart as helm push does. It pulls both back by digest: the index is
// the one of the release's archive, each platform's config carries the
// release's labels; cosign verifies the signature and the attestations in
// the registry with the public key; the chart is the packaged one, and
// rendered with image.digest the pushed digest its Deployment runs
// repository@digest.
func TestPublish(t *testing.T) {
	ctx := context.Background()
	dist := fixture(t)
	key, pub := newKey(t)
	if err := SignRelease(fixtureOptions(dist, key)); err != nil {
		t.Fatal(err)
	}
	v := strings.TrimPrefix(fixtureVersion, "v")
	host := startRegistry(t)
	repo := host + "/walstream/walstream"
	p := Publisher{Dist: dist, Version: fixtureVersion, Repository: repo, Charts: "oci://" + host + "/charts", PlainHTTP: true}
	pushed, err := p.Publish()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s@%s and %s@%s", pushed.Image, pushed.ImageDigest, pushed.Chart, pushed.ChartDigest)

	// The image, by digest.
	want, err := ReadIndex(filepath.Join(dist, "walstream_"+v+ImageSuffix), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wantDigest, _ := want.Digest()
	ref, err := name.NewDigest(repo + "@" + pushed.ImageDigest.String())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := idx.Digest(); got != wantDigest || pushed.ImageDigest != wantDigest {
		t.Fatalf("pulled index %s, pushed %s, the release's archive holds %s", got, pushed.ImageDigest, wantDigest)
	}
	tagged, err := remote.Head(pushed.Image, remote.WithContext(ctx))
	if err != nil || tagged.Digest != wantDigest {
		t.Errorf("%s is %v (%v), want %s", pushed.Image, tagged, err, wantDigest)
	}
	checkPulledImage(t, idx)

	// Its signature and attestations, in the registry.
	verifier, err := LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	co := &cosign.CheckOpts{
		SigVerifier:        verifier,
		IgnoreTlog:         true,
		ClaimVerifier:      cosign.SimpleClaimVerifier,
		RegistryClientOpts: []ociremote.Option{ociremote.WithRemoteOptions(remote.WithContext(ctx))},
	}
	if _, _, err := cosign.VerifyImageSignatures(ctx, ref, co); err != nil {
		t.Errorf("the signature of %s in the registry: %v", ref, err)
	}
	co.ClaimVerifier = cosign.IntotoSubjectClaimVerifier
	atts, _, err := cosign.VerifyImageAttestations(ctx, ref, co)
	if err != nil {
		t.Fatalf("the attestations of %s in the registry: %v", ref, err)
	}
	types, err := PredicateTypes(atts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(types, PredicateProvenance) || !slices.Contains(types, PredicateCycloneDX) {
		t.Errorf("attestations in the registry of %q, want SLSA v1 provenance and CycloneDX", types)
	}
	_, other := newKey(t)
	if co.SigVerifier, err = LoadVerifier(other); err != nil {
		t.Fatal(err)
	}
	co.ClaimVerifier = cosign.SimpleClaimVerifier
	if _, _, err := cosign.VerifyImageSignatures(ctx, ref, co); err == nil {
		t.Errorf("the image in the registry verified with another key")
	}

	// The chart, by digest.
	r := ChartRegistry{PlainHTTP: true}
	data, digest, err := r.PullChart(host + "/charts/walstream@" + pushed.ChartDigest)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := os.ReadFile(filepath.Join(dist, "walstream-"+v+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if digest != pushed.ChartDigest || !bytes.Equal(data, tgz) {
		t.Errorf("pulled chart of manifest %s, %d bytes; pushed %s, %d bytes", digest, len(data), pushed.ChartDigest, len(tgz))
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if m := ch.Metadata; m.Name != "walstream" || m.Version != v || m.AppVersion != fixtureVersion {
		t.Errorf("pulled Chart.yaml: %s %s, appVersion %s; want walstream %s, appVersion %s", m.Name, m.Version, m.AppVersion, v, fixtureVersion)
	}
	// Dated as the chart's files, not when pushed: every push of a release
	// gives one digest.
	chartRef, err := name.ParseReference(host + "/charts/walstream@" + pushed.ChartDigest)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(chartRef)
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct{ Annotations map[string]string }
	if err := json.Unmarshal(desc.Manifest, &manifest); err != nil {
		t.Fatal(err)
	}
	if got := manifest.Annotations["org.opencontainers.image.created"]; got != fixtureTime.Format(time.RFC3339) {
		t.Errorf("the chart's manifest is dated %q, want its files' time %s", got, fixtureTime.Format(time.RFC3339))
	}
	checkDigestPin(t, data, repo, pushed.ImageDigest)
}

// checkPulledImage checks each platform's image as TestImage checks the
// archive's: the platform, the user and entrypoint, the release's labels.
func checkPulledImage(t *testing.T, idx v1.ImageIndex) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	labels := image.Options{Version: fixtureVersion, Commit: fixtureCommit, Created: fixtureTime}.Labels()
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture || c.User != image.User || !slices.Equal(c.Entrypoint, []string{image.Binary}) {
			t.Errorf("%s/%s: config for %s/%s, user %q, entrypoint %q", d.Platform.OS, d.Platform.Architecture, cf.OS, cf.Architecture, c.User, c.Entrypoint)
		}
		for k, want := range labels {
			if c.Labels[k] != want {
				t.Errorf("%s/%s: label %s = %q, want %q", d.Platform.OS, d.Platform.Architecture, k, c.Labels[k], want)
			}
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("pulled index of %v, want linux/amd64 and linux/arm64", platforms)
	}
}

// checkDigestPin renders the pulled chart with image.digest set, as a
// cluster that admits only verified images would install it.
func checkDigestPin(t *testing.T, data []byte, repo string, digest v1.Hash) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "walstream.tgz")
	writeFile(t, file, data)
	vals, err := chart.ReadValues(filepath.Join(build.Root, "deploy/kubernetes/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	vals["image"] = map[string]any{"repository": repo, "digest": digest.String()}
	objs, err := chart.Render(chart.Helms[0], file, "walstream", "streams", vals)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if d, ok := o.Value.(*appsv1.Deployment); ok {
			if got := d.Spec.Template.Spec.Containers[0].Image; got != repo+"@"+digest.String() {
				t.Errorf("the Deployment runs %s, want %s@%s", got, repo, digest)
			}
			return
		}
	}
	t.Errorf("the chart rendered no Deployment")
}
