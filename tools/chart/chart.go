package chart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Object is one rendered object: its template, its YAML, and the API
// type it decoded into.
type Object struct {
	Template string
	YAML     []byte
	Kind     string
	Name     string
	// Hook is the object's helm.sh/hook annotation: what Helm runs at a
	// point of a release's life (helm test), not part of the release.
	Hook  string
	Value any
}

// Render renders the chart in dir with vals over its values.yaml, as
// release name in namespace, as h's `helm template` does, and decodes
// every object.
func Render(h Helm, dir, name, namespace string, vals map[string]any) ([]Object, error) {
	files, err := h.Template(dir, name, namespace, vals)
	if err != nil {
		return nil, err
	}
	var objs []Object
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(n, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(files[n], "\n---") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, err := Decode([]byte(doc))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
				continue
			}
			o.Template = n
			objs = append(objs, o)
		}
	}
	return objs, errors.Join(errs...)
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// Decode decodes one YAML document strictly into the API type of its
// apiVersion and kind: a duplicate key, an unknown field, a field named
// with the wrong case or a value of the wrong type is an error, as it is
// to `kubectl apply --validate=strict`.
func Decode(doc []byte) (Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return Object{}, err
	}
	var v any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		v = &corev1.ConfigMap{}
	case "v1 Secret":
		v = &corev1.Secret{}
	case "v1 Service":
		v = &corev1.Service{}
	case "v1 ServiceAccount":
		v = &corev1.ServiceAccount{}
	case "apps/v1 Deployment":
		v = &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		v = &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v = &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		v = &monitoringv1.PrometheusRule{}
	case "v1 Pod":
		v = &corev1.Pod{}
	case "rbac.authorization.k8s.io/v1 Role":
		v = &rbacv1.Role{}
	case "rbac.authorization.k8s.io/v1 RoleBinding":
		v = &rbacv1.RoleBinding{}
	default:
		return Object{}, fmt.Errorf("apiVersion %q kind %q: not a type this chart renders", tm.APIVersion, tm.Kind)
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err := errors.Join(append(strict, err)...); err != nil {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	var meta struct {
		Metadata struct {
			Name        string
			Annotations map[string]string
		}
	}
	_ = json.Unmarshal(j, &meta)
	return Object{YAML: bytes.TrimSpace(doc), Kind: tm.Kind, Name: meta.Metadata.Name, Hook: meta.Metadata.Annotations["helm.sh/hook"], Value: v}, nil
}

// ReadValues reads a values file.
func ReadValues(file string) (map[string]any, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	vals := make(map[string]any)
	if err := yaml.Unmarshal(b, &vals); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return vals, nil
}

// Manifests are the plain manifests of deploy/kubernetes: walstream.yaml
// (what runs walstream) and monitoring.yaml (what the Prometheus
// Operator and Grafana's sidecar read), from objs; hooks are Helm's and
// left out.
func Manifests(objs []Object, header string) map[string][]byte {
	out := map[string]*bytes.Buffer{"walstream.yaml": {}, "monitoring.yaml": {}}
	for _, o := range objs {
		if o.Hook != "" {
			continue
		}
		file := "walstream.yaml"
		if o.Kind == "ServiceMonitor" || o.Kind == "PrometheusRule" || strings.HasSuffix(o.Template, "/dashboard.yaml") {
			file = "monitoring.yaml"
		}
		b := out[file]
		if b.Len() == 0 {
			b.WriteString(header)
		} else {
			b.WriteString("---\n")
		}
		b.Write(o.YAML)
		b.WriteString("\n")
	}
	m := make(map[string][]byte)
	for f, b := range out {
		m[f] = b.Bytes()
	}
	return m
}
