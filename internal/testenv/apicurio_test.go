package testenv

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// TestRegistry starts Apicurio Registry and registers through its
// Confluent-compatible API: the same text twice is one id and one version,
// and a cut gate refuses clients until restored.
func TestRegistry(t *testing.T) {
	r := StartRegistry(t)
	cl, err := sr.NewClient(sr.URLs(r.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := sr.Schema{Schema: `"string"`}
	id, err := cl.RegisterSchema(ctx, "t-key", s, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.RegisterSchema(ctx, "t-key", s, -1, -1)
	if err != nil || again != id {
		t.Fatalf("registering again: id %d, %v; want %d", again, err, id)
	}
	if v, err := cl.SubjectVersions(ctx, "t-key"); err != nil || len(v) != 1 {
		t.Fatalf("versions %v, %v; want one", v, err)
	}
	r.Cut()
	if _, err := cl.Subjects(ctx); err == nil {
		t.Fatal("the registry answered through a cut gate")
	}
	if err := r.Restore(); err != nil {
		t.Fatal(err)
	}
	if subjects, err := cl.Subjects(ctx); err != nil || len(subjects) != 1 {
		t.Fatalf("after restoring: subjects %v, %v", subjects, err)
	}
}
