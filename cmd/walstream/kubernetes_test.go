package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesManifest pins the rollout design docs/getting-started.md argues: both a
// streaming pod and a healthy standby are Ready, a new pod is Ready before
// an old one stops, the image is pinned, and the least-privilege role does
// not create the slot.
func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/walstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct{ Path string } `yaml:"httpGet"`
	}
	type container struct {
		Image           string
		ImagePullPolicy string `yaml:"imagePullPolicy"`
		Args            []string
		Env             []struct{ Name, Value string }
		ReadinessProbe  probe `yaml:"readinessProbe"`
		LivenessProbe   probe `yaml:"livenessProbe"`
		VolumeMounts    []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	type doc struct {
		Kind string
		Spec struct {
			Replicas int
			Strategy struct {
				Type          string
				RollingUpdate struct {
					MaxSurge       int `yaml:"maxSurge"`
					MaxUnavailable int `yaml:"maxUnavailable"`
				} `yaml:"rollingUpdate"`
			}
			MaxUnavailable int `yaml:"maxUnavailable"`
			Template       struct {
				Metadata struct{ Labels map[string]string }
				Spec     struct {
					Containers []container
					Volumes    []struct {
						Name     string
						EmptyDir *struct{} `yaml:"emptyDir"`
					}
				}
			}
		}
	}
	kinds := make(map[string]doc)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d doc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		kinds[d.Kind] = d
	}
	dep, ok := kinds["Deployment"]
	if !ok || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment with one container in %v", kinds)
	}
	ru := dep.Spec.Strategy.RollingUpdate
	if dep.Spec.Replicas != 2 || dep.Spec.Strategy.Type != "RollingUpdate" || ru.MaxSurge != 1 || ru.MaxUnavailable != 0 {
		t.Errorf("replicas %d, strategy %+v: want 2 replicas, RollingUpdate with maxSurge 1 and maxUnavailable 0", dep.Spec.Replicas, dep.Spec.Strategy)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe.HTTPGet.Path != "/readyz?standby=1" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %q and %q, want readiness /readyz?standby=1 and liveness /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	if tag := c.Image[strings.LastIndex(c.Image, ":")+1:]; !strings.Contains(c.Image, ":") || tag == "latest" || c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("image %q pulled %q: want a pinned tag, IfNotPresent", c.Image, c.ImagePullPolicy)
	}
	env := make(map[string]string)
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["WALSTREAM_CREATE"] != "false" || strings.Contains(strings.Join(c.Args, " "), "--create=true") {
		t.Errorf("env %v, args %v: the least-privilege role must run with --create=false", env, c.Args)
	}
	// The root filesystem is read-only; streamed transactions are spooled
	// in the temporary directory until they commit.
	tmp := ""
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/tmp" {
			tmp = m.Name
		}
	}
	writable := false
	for _, v := range dep.Spec.Template.Spec.Volumes {
		writable = writable || v.Name == tmp && v.EmptyDir != nil
	}
	if !writable {
		t.Errorf("no emptyDir mounted at /tmp (mounts %+v): streamed transactions cannot be spooled", c.VolumeMounts)
	}
	if dep.Spec.Template.Metadata.Labels["slot"] == "" {
		t.Error("pods have no slot label: the dashboard and the alerts group by it")
	}
	if pdb, ok := kinds["PodDisruptionBudget"]; !ok || pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1", pdb)
	}
}
