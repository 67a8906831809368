package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesManifest pins the rollout design docs/getting-started.md argues: both a
// streaming pod and a healthy standby are Ready, a new pod is Ready before
// an old one stops, the image is pinned, and the least-privilege role does
// not create the slot. The settings are the ConfigMap's walstream.yaml,
// which walstream reads as it is; passwords are files mounted from the
// Secret, in no URL or environment variable; the ServiceAccount carries
// the IRSA annotation MSK IAM uses.
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
		VolumeMounts    []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
		ReadinessProbe probe `yaml:"readinessProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
	}
	type doc struct {
		Kind     string
		Metadata struct {
			Name        string
			Annotations map[string]string
		}
		Data       map[string]string
		StringData map[string]string `yaml:"stringData"`
		Spec       struct {
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
					ServiceAccountName string `yaml:"serviceAccountName"`
					Containers         []container
					Volumes            []struct {
						Name      string
						EmptyDir  *struct{}             `yaml:"emptyDir"`
						ConfigMap struct{ Name string } `yaml:"configMap"`
						Secret    struct {
							SecretName string `yaml:"secretName"`
						}
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
	for name := range env {
		if strings.HasPrefix(name, envPrefix) {
			t.Errorf("setting %s in the environment: settings belong in the ConfigMap's walstream.yaml", name)
		}
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
	if dep.Spec.Template.Metadata.Labels["slot"] != "" {
		t.Error("pods carry a slot label: walstream labels its own series, and a target label slot would clash")
	}

	// walstream.yaml, mounted where --config reads it, with the Secret's
	// files where it names them.
	mounts := map[string]string{}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				mounts[v.ConfigMap.Name+v.Secret.SecretName+"/"+map[bool]string{true: "config", false: "secret"}[v.ConfigMap.Name != ""]] = m.MountPath
			}
		}
	}
	cm, secret := kinds["ConfigMap"], kinds["Secret"]
	file := cm.Data["walstream.yaml"]
	if file == "" || mounts["walstream/config"] != "/etc/walstream/config" || mounts["walstream/secret"] != "/etc/walstream/secrets" ||
		strings.Join(c.Args, " ") != "run --config /etc/walstream/config/walstream.yaml" {
		t.Fatalf("args %v, mounts %v: want the ConfigMap's walstream.yaml at /etc/walstream/config read by --config, the Secret at /etc/walstream/secrets", c.Args, mounts)
	}
	dir := t.TempDir()
	for key, value := range secret.StringData {
		if strings.Contains(file, value) {
			t.Errorf("walstream.yaml holds the secret %s", key)
		}
		if err := os.WriteFile(filepath.Join(dir, key), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	local := filepath.Join(dir, "walstream.yaml")
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(file, "/etc/walstream/secrets", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"--config", local}, io.Discard)
	if err != nil {
		t.Fatalf("walstream.yaml: %v", err)
	}
	if cfg.Create || cfg.Postgres.Password != secret.StringData["pg-password"] || cfg.Kafka.SASLPassword != secret.StringData["kafka-sasl-password"] ||
		strings.Contains(cfg.PGURL, ":"+secret.StringData["pg-password"]) || cfg.Stream == "" {
		t.Errorf("walstream.yaml: create %v, stream %q; want --create=false, the passwords from the mounted files and none in the URL", cfg.Create, cfg.Stream)
	}
	if !strings.Contains(file, "kafka-sasl-mechanism: AWS_MSK_IAM") {
		t.Error("walstream.yaml does not show the AWS_MSK_IAM alternative")
	}
	sa := kinds["ServiceAccount"]
	if dep.Spec.Template.Spec.ServiceAccountName != sa.Metadata.Name || !strings.HasPrefix(sa.Metadata.Annotations["eks.amazonaws.com/role-arn"], "arn:aws:iam::") {
		t.Errorf("ServiceAccount %+v used by the pods as %q: want the IRSA annotation eks.amazonaws.com/role-arn", sa.Metadata, dep.Spec.Template.Spec.ServiceAccountName)
	}
	if pdb, ok := kinds["PodDisruptionBudget"]; !ok || pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1", pdb)
	}
}
