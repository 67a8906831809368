package testenv

import (
	"context"
	"net"
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

// A registry whose port another process took between the pick and its
// start says so as Quarkus does, and LaunchRegistry takes that for a
// taken port (it starts it again on another), not for a registry that
// cannot start.
func TestRegistryPortTaken(t *testing.T) {
	r, java, jar, err := installedRegistry()
	if err != nil {
		Unavailable(t, "%v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	r.port = ln.Addr().(*net.TCPAddr).Port
	if err := r.start(context.Background(), java, jar, nil); !portTaken(err) {
		t.Fatalf("starting on a port taken: %v, want an error portTaken knows", err)
	}
}
