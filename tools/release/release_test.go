package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sigstore/cosign/v2/pkg/cosign"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/walstream/walstream/tools/image"
	"github.com/walstream/walstream/tools/internal/build"
)

const (
	fixtureVersion = "v1.2.3"
	fixtureCommit  = "0123456789abcdef0123456789abcdef01234567"
	password       = "correct horse"
)

var fixtureTime = time.Unix(1795854600, 0).UTC()

// newKey makes a key pair as cosign generate-key-pair does: ECDSA P-256,
// the private key encrypted with password.
func newKey(t *testing.T) (*Signer, []byte) {
	t.Helper()
	kb, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return []byte(password), nil })
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadKey(kb.PrivateBytes, []byte(password))
	if err != nil {
		t.Fatal(err)
	}
	return s, kb.PublicBytes
}

// fixture writes a small release of fixtureVersion into a new folder, as
// make release does before it signs: the image of two platforms (a few
// bytes for each binary), a docker archive, goreleaser's archive and the
// SBOMs, the chart packaged from deploy/helm/walstream, the notes.
func fixture(t *testing.T) string {
	t.Helper()
	dist := t.TempDir()
	v := strings.TrimPrefix(fixtureVersion, "v")
	bins := map[string]string{}
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		bin := filepath.Join(t.TempDir(), "walstream")
		if err := os.WriteFile(bin, []byte("\x7fELF walstream for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[p] = bin
		sbom := `{"bomFormat":"CycloneDX","specVersion":"1.6","metadata":{"component":{"name":"walstream","version":"` + fixtureVersion + `","properties":[{"name":"platform","value":"` + p + `"}]}}}`
		writeFile(t, filepath.Join(dist, "walstream_"+v+"_"+strings.ReplaceAll(p, "/", "_")+".cdx.json"), []byte(sbom))
	}
	idx, err := image.Build(image.Options{Version: fixtureVersion, Commit: fixtureCommit, Created: fixtureTime, Binaries: bins})
	if err != nil {
		t.Fatal(err)
	}
	ref := image.Repository + ":" + fixtureVersion
	if err := image.WriteArchive(filepath.Join(dist, "walstream_"+v+ImageSuffix), idx, ref, fixtureTime); err != nil {
		t.Fatal(err)
	}
	if err := image.WriteDockerArchive(filepath.Join(dist, "walstream_"+v+"_linux_amd64.docker.tar"), idx, "linux/amd64", ref); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dist, "RELEASE_NOTES.md"), []byte("## [1.2.3]\n"))
	// Helm's loader logs each symbolic link it follows: the chart's files/
	// link to deploy/prometheus and deploy/grafana.
	log.SetOutput(io.Discard)
	ch, err := loader.Load(filepath.Join(build.Root, "deploy/helm/walstream"))
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = v, fixtureVersion
	saved, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	chart := redate(t, saved)
	writeFile(t, filepath.Join(dist, filepath.Base(saved)), chart)
	// goreleaser's archive: only checksummed here, any gzipped tar serves.
	writeFile(t, filepath.Join(dist, "walstream_"+v+"_linux_amd64.tar.gz"), chart)
	// goreleaser's own files, which the release does not ship.
	writeFile(t, filepath.Join(dist, "artifacts.json"), []byte("[]"))
	return dist
}

func writeFile(t *testing.T, file string, b []byte) {
	t.Helper()
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// redate returns the gzipped tar archive at file with every entry dated
// fixtureTime, as release-chart dates the chart's the commit's time.
func redate(t *testing.T, file string) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		h.ModTime = fixtureTime
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func fixtureOptions(dist string, key *Signer) Options {
	return Options{
		Dist:       dist,
		Version:    fixtureVersion,
		Repository: image.Repository,
		Created:    fixtureTime,
		Key:        key,
		Provenance: Provenance{
			BuilderID: "https://github.com/walstream/walstream/.github/workflows/release.yml@refs/tags/" + fixtureVersion,
			Source:    image.Source,
			Commit:    fixtureCommit,
			Version:   fixtureVersion,
			Epoch:     fixtureTime.Unix(),
			Toolchain: "go1.26.8",
			Tools:     []string{"github.com/goreleaser/goreleaser/v2@v2.15.1"},
		},
	}
}

// TestSignVerify signs a small release as make release signs its own
// (release-sign), twice, and verifies it as make verify-release does, with
// cosign's verification of the signatures: every file listed, SHA256SUMS
// signed, the image signed and attested with SLSA v1 provenance of the
// commit and each platform's SBOM. The two signings are byte for byte the
// same. A byte flipped in an archive, a wrong key, a signature of another
// image and an attestation's subject changed all fail, naming what.
func TestSignVerify(t *testing.T) {
	ctx := context.Background()
	dist := fixture(t)
	key, pub := newKey(t)
	v := strings.TrimPrefix(fixtureVersion, "v")
	signedFiles := []string{Sums, SumsSig, "walstream_" + v + SignedSuffix}
	var first [][]byte
	for i := range 2 {
		if err := SignRelease(fixtureOptions(dist, key)); err != nil {
			t.Fatal(err)
		}
		for j, f := range signedFiles {
			b, err := os.ReadFile(filepath.Join(dist, f))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = append(first, b)
			} else if !bytes.Equal(b, first[j]) {
				t.Errorf("%s differs between two signings with one key", f)
			}
		}
	}

	res, err := VerifyDist(ctx, dist, pub)
	if err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(dist, Sums))
	for _, f := range []string{"walstream_" + v + "_linux_amd64.tar.gz", "walstream_" + v + "_linux_amd64.docker.tar", "walstream_" + v + "_linux_arm64.cdx.json", "walstream_" + v + ImageSuffix, "walstream-" + v + ".tgz", "RELEASE_NOTES.md"} {
		if !strings.Contains(string(sums), "  "+f+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", f, sums)
		}
	}
	// Nor what depends on the key, nor goreleaser's own files.
	if strings.Contains(string(sums), SignedSuffix) || strings.Contains(string(sums), "artifacts.json") || res.Files != strings.Count(string(sums), "\n") {
		t.Errorf("%d files verified; SHA256SUMS:\n%s", res.Files, sums)
	}
	idx, err := ReadIndex(filepath.Join(dist, "walstream_"+v+ImageSuffix), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := idx.Digest(); res.Index != h {
		t.Errorf("verified index %s, the image archive's is %s", res.Index, h)
	}
	slices.Sort(res.Predicates)
	if want := []string{PredicateCycloneDX, PredicateCycloneDX, PredicateProvenance}; !slices.Equal(res.Predicates, want) {
		t.Errorf("attestations of %q, want %q", res.Predicates, want)
	}
	checkProvenance(t, filepath.Join(dist, "walstream_"+v+SignedSuffix), pub, res.Index.Hex)

	t.Run("tampered archive", func(t *testing.T) {
		d := copyDir(t, dist)
		file := filepath.Join(d, "walstream_"+v+"_linux_amd64.tar.gz")
		flipByte(t, file)
		_, err := VerifyDist(ctx, d, pub)
		if err == nil || !strings.Contains(err.Error(), file) {
			t.Errorf("a byte flipped in %s: %v, want an error naming it", file, err)
		}
		t.Log(err)
	})
	t.Run("wrong key", func(t *testing.T) {
		_, other := newKey(t)
		_, err := VerifyDist(ctx, dist, other)
		if err == nil || !strings.Contains(err.Error(), SumsSig) {
			t.Errorf("verified with another key: %v, want SHA256SUMS.sig failing", err)
		}
		t.Log(err)
		v, err := LoadVerifier(other)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := VerifyImage(ctx, filepath.Join(dist, "walstream_"+fixtureVersion[1:]+SignedSuffix), v); err == nil || !strings.Contains(err.Error(), "signature") {
			t.Errorf("image verified with another key: %v", err)
		}
	})
	t.Run("sums rewritten", func(t *testing.T) {
		// Whoever changes a file and SHA256SUMS cannot sign it.
		d := copyDir(t, dist)
		flipByte(t, filepath.Join(d, "RELEASE_NOTES.md"))
		sums, err := Checksums(d, v)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(d, Sums), sums)
		if _, err := VerifyDist(ctx, d, pub); err == nil || !strings.Contains(err.Error(), SumsSig) {
			t.Errorf("SHA256SUMS rewritten: %v, want its signature failing", err)
		}
	})
	t.Run("signature of another image", func(t *testing.T) {
		// The signed archive of another build, with SHA256SUMS signed anew:
		// its index is not the image archive's.
		d := copyDir(t, dist)
		other := fixtureOptions(d, key)
		other.Version = "v1.2.4"
		idx, err := image.Build(image.Options{Version: other.Version, Commit: fixtureCommit, Created: fixtureTime, Binaries: map[string]string{"linux/amd64": filepath.Join(d, "RELEASE_NOTES.md")}})
		if err != nil {
			t.Fatal(err)
		}
		pred, err := other.Provenance.Predicate()
		if err != nil {
			t.Fatal(err)
		}
		atts := []Attestation{{TypeProvenance, pred}, {TypeCycloneDX, []byte(`{"bomFormat":"CycloneDX"}`)}}
		sii, err := SignIndex(key, idx, image.Repository, atts)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteSignedArchive(filepath.Join(d, "walstream_"+v+SignedSuffix), sii, fixtureTime); err != nil {
			t.Fatal(err)
		}
		_, err = VerifyDist(ctx, d, pub)
		if err == nil || !strings.Contains(err.Error(), "the one walstream_"+v+SignedSuffix+" signs") {
			t.Errorf("a release whose signed image is another: %v", err)
		}
		t.Log(err)
		// Nor is one without attestations taken.
		if sii, err = SignIndex(key, idx, image.Repository, nil); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(d, "unattested.tar")
		if err := WriteSignedArchive(file, sii, fixtureTime); err != nil {
			t.Fatal(err)
		}
		if _, _, err := VerifyImage(ctx, file, key); err == nil || !strings.Contains(err.Error(), "no attestations") {
			t.Errorf("an image without attestations: %v", err)
		}
	})
}

// checkProvenance reads the verified SLSA provenance of the signed archive
// and checks what it states: the image as subject, the builder, the commit.
func checkProvenance(t *testing.T, file string, pub []byte, digest string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := image.ReadArchive(file, dir); err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	atts, _, err := cosign.VerifyLocalImageAttestations(context.Background(), dir, &cosign.CheckOpts{SigVerifier: v, IgnoreTlog: true, ClaimVerifier: cosign.IntotoSubjectClaimVerifier})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		p, _ := a.Payload()
		var env struct{ Payload []byte }
		if err := json.Unmarshal(p, &env); err != nil {
			t.Fatal(err)
		}
		var stmt struct {
			Subject []struct {
				Name   string
				Digest map[string]string
			}
			PredicateType string
			Predicate     struct {
				BuildDefinition struct {
					BuildType            string
					ResolvedDependencies []struct {
						URI    string
						Digest map[string]string
					}
				}
				RunDetails struct{ Builder struct{ ID string } }
			}
		}
		if err := json.Unmarshal(env.Payload, &stmt); err != nil {
			t.Fatal(err)
		}
		if len(stmt.Subject) != 1 || stmt.Subject[0].Name != image.Repository || stmt.Subject[0].Digest["sha256"] != digest {
			t.Errorf("%s attestation of %+v, want %s@sha256:%s", stmt.PredicateType, stmt.Subject, image.Repository, digest)
		}
		if stmt.PredicateType != PredicateProvenance {
			continue
		}
		pr := stmt.Predicate
		deps := pr.BuildDefinition.ResolvedDependencies
		if pr.BuildDefinition.BuildType != BuildType || !strings.HasSuffix(pr.RunDetails.Builder.ID, "release.yml@refs/tags/"+fixtureVersion) ||
			len(deps) != 3 || deps[0].URI != "git+"+image.Source+"@"+fixtureCommit || deps[0].Digest["gitCommit"] != fixtureCommit {
			t.Errorf("provenance %+v: want the build type, the workflow as builder, the commit, go and goreleaser as dependencies", pr)
		}
		return
	}
	t.Errorf("no provenance among %d attestations", len(atts))
}

func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	if err := os.CopyFS(out, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return out
}

// flipByte flips the bits of one byte in the middle of file.
func flipByte(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	writeFile(t, file, b)
}
