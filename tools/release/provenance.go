package release

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/in-toto/in-toto-golang/in_toto/slsa_provenance/common"
	slsa1 "github.com/in-toto/in-toto-golang/in_toto/slsa_provenance/v1"
)

// BuildType names how make release builds: the recipe its provenance
// describes, scripts/release.sh at the commit.
const BuildType = "https://github.com/walstream/walstream/blob/main/docs/development.md#releases"

// Provenance is what the SLSA v1 provenance of a release states: who built
// it, from which commit and with what.
type Provenance struct {
	// BuilderID names who ran make release: the release workflow in CI,
	// or a person's machine.
	BuilderID string
	// Source is the repository (https://github.com/walstream/walstream),
	// Commit the commit built, Version the release's name (v0.1.0).
	Source, Commit, Version string
	// Epoch is the commit's time (SOURCE_DATE_EPOCH), which every time in
	// the release is.
	Epoch int64
	// Toolchain is the Go the release was built with (go1.26.8), Tools
	// the pinned modules make release ran (goreleaser, cyclonedx-gomod), as
	// module@version.
	Toolchain string
	Tools     []string
}

// Predicate returns the provenance as an SLSA v1 predicate
// (https://slsa.dev/provenance/v1). It holds no time of the build, nor an
// invocation id: two builds of one commit state the same.
func (p Provenance) Predicate() ([]byte, error) {
	if p.BuilderID == "" || p.Source == "" || len(p.Commit) != 40 || p.Version == "" {
		return nil, fmt.Errorf("provenance: builder %q, source %q, commit %q and version %q are all needed", p.BuilderID, p.Source, p.Commit, p.Version)
	}
	deps := []slsa1.ResourceDescriptor{{
		URI:    "git+" + p.Source + "@" + p.Commit,
		Digest: common.DigestSet{"gitCommit": p.Commit},
	}}
	if p.Toolchain != "" {
		deps = append(deps, slsa1.ResourceDescriptor{URI: "pkg:golang/go@" + p.Toolchain, Name: "go"})
	}
	for _, t := range p.Tools {
		mod, v, ok := strings.Cut(t, "@")
		if !ok {
			return nil, fmt.Errorf("provenance: tool %q is not module@version", t)
		}
		deps = append(deps, slsa1.ResourceDescriptor{URI: "pkg:golang/" + mod + "@" + v, Name: mod})
	}
	pred := slsa1.ProvenancePredicate{
		BuildDefinition: slsa1.ProvenanceBuildDefinition{
			BuildType: BuildType,
			ExternalParameters: map[string]string{
				"source":  p.Source,
				"version": p.Version,
			},
			InternalParameters: map[string]any{
				"SOURCE_DATE_EPOCH": p.Epoch,
			},
			ResolvedDependencies: deps,
		},
		RunDetails: slsa1.ProvenanceRunDetails{Builder: slsa1.Builder{ID: p.BuilderID}},
	}
	return json.Marshal(pred)
}
