package chart

import (
	"os"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// rendered is the chart's rendering, by kind, for the checks of TestValues.
type rendered map[string][]Object

func (r rendered) pod(t *testing.T) corev1.PodSpec {
	t.Helper()
	if len(r["Deployment"]) != 1 {
		t.Fatalf("%d Deployments, want 1", len(r["Deployment"]))
	}
	return r["Deployment"][0].Value.(*appsv1.Deployment).Spec.Template.Spec
}

func (r rendered) container(t *testing.T) corev1.Container {
	t.Helper()
	return r.pod(t).Containers[0]
}

// testPod is the helm test hook, or nil.
func (r rendered) testPod(t *testing.T) *corev1.Pod {
	t.Helper()
	for _, o := range r["Pod"] {
		if o.Hook == "test" {
			return o.Value.(*corev1.Pod)
		}
	}
	return nil
}

// rules are the PrometheusRule's alert rules by name.
func (r rendered) rules(t *testing.T) map[string]monitoringv1.Rule {
	t.Helper()
	if len(r["PrometheusRule"]) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r["PrometheusRule"]))
	}
	out := make(map[string]monitoringv1.Rule)
	for _, g := range r["PrometheusRule"][0].Value.(*monitoringv1.PrometheusRule).Spec.Groups {
		for _, rule := range g.Rules {
			out[rule.Alert] = rule
		}
	}
	return out
}

// fileAlerts are the alerts of deploy/prometheus/alerts.yml.
func fileAlerts(t *testing.T) []Alert {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := ReadAlerts(b)
	if err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return alerts
}

// valuesOf reads values written as YAML, afresh at each call.
func valuesOf(s string) func(*testing.T) map[string]any {
	return func(t *testing.T) map[string]any {
		vals := make(map[string]any)
		if err := yaml.Unmarshal([]byte(s), &vals); err != nil {
			t.Fatal(err)
		}
		return vals
	}
}

// TestValues: each value renders into its place, with Helm 3 and Helm 4.
func TestValues(t *testing.T) {
	alerts := fileAlerts(t)
	for _, c := range []struct {
		name, vals string
		check      func(t *testing.T, r rendered)
	}{
		{"extras", `
extraVolumes: [{name: rds-ca, configMap: {name: rds-ca-bundle}}]
extraVolumeMounts: [{name: rds-ca, mountPath: /etc/walstream/rds-ca, readOnly: true}]
envFrom: [{secretRef: {name: walstream-env}}]
initContainers: [{name: wait, image: busybox:1.37.0, command: ["true"]}]
extraContainers: [{name: proxy, image: cloud-sql-proxy:2, args: [--port=5432]}]
`, func(t *testing.T, r rendered) {
			pod, c := r.pod(t), r.container(t)
			if v := pod.Volumes[len(pod.Volumes)-1]; v.Name != "rds-ca" || v.ConfigMap == nil || v.ConfigMap.Name != "rds-ca-bundle" {
				t.Errorf("last volume %+v, want extraVolumes' rds-ca", v)
			}
			if m := c.VolumeMounts[len(c.VolumeMounts)-1]; m.Name != "rds-ca" || m.MountPath != "/etc/walstream/rds-ca" || !m.ReadOnly {
				t.Errorf("walstream's last mount %+v, want extraVolumeMounts' rds-ca", m)
			}
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "walstream-env" {
				t.Errorf("envFrom %+v, want the Secret walstream-env", c.EnvFrom)
			}
			if len(pod.InitContainers) != 1 || pod.InitContainers[0].Name != "wait" {
				t.Errorf("init containers %+v, want wait", pod.InitContainers)
			}
			if len(pod.Containers) != 2 || pod.Containers[0].Name != "walstream" || pod.Containers[1].Name != "proxy" || pod.Containers[1].Args[0] != "--port=5432" {
				t.Errorf("containers %+v, want walstream and the sidecar proxy", pod.Containers)
			}
		}},
		{"probes", `
livenessProbe: {periodSeconds: 20, failureThreshold: 3}
readinessProbe: {httpGet: {path: /readyz}}
startupProbe: {enabled: false}
`, func(t *testing.T, r rendered) {
			c := r.container(t)
			if p := c.LivenessProbe; p == nil || p.PeriodSeconds != 20 || p.FailureThreshold != 3 || p.HTTPGet.Path != "/healthz" || p.TimeoutSeconds != 1 {
				t.Errorf("liveness %+v, want /healthz every 20 s, 3 failures", p)
			}
			if p := c.ReadinessProbe; p == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "metrics" || p.PeriodSeconds != 5 {
				t.Errorf("readiness %+v, want /readyz on the metrics port every 5 s", p)
			}
			if c.StartupProbe != nil {
				t.Errorf("startup probe %+v, want none", c.StartupProbe)
			}
		}},
		{"probe handler", `
livenessProbe: {httpGet: null, exec: {command: [walstream, --version]}}
`, func(t *testing.T, r rendered) {
			if p := r.container(t).LivenessProbe; p == nil || p.HTTPGet != nil || p.Exec == nil || p.Exec.Command[0] != "walstream" {
				t.Errorf("liveness %+v, want the exec handler alone", p)
			}
		}},
		{"startup probe", ``, func(t *testing.T, r rendered) {
			if p := r.container(t).StartupProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.PeriodSeconds != 2 || p.FailureThreshold != 90 {
				t.Errorf("startup probe %+v, want /healthz every 2 s for 3 minutes", p)
			}
		}},
		{"alerts", `
metrics:
  prometheusRule:
    enabled: true
    alerts:
      WalstreamSlotLagHigh: {threshold: 5e8, for: 30m}
      WalstreamNoConfirm: {threshold: 900}
      WalstreamSlotSpilling: {threshold: 0.5}
      WalstreamErrors: {enabled: false}
`, func(t *testing.T, r rendered) {
			got := r.rules(t)
			if _, ok := got["WalstreamErrors"]; ok {
				t.Error("WalstreamErrors rendered, want it left out")
			}
			changed := map[string]string{
				"WalstreamSlotLagHigh":  "max by (stream, slot, database) (walstream_slot_confirmed_lag_bytes) > 500000000",
				"WalstreamNoConfirm":    "max by (stream, slot, database, instance) (walstream_last_confirm_age_seconds and on (instance, job) (walstream_streaming == 1)) > 900",
				"WalstreamSlotSpilling": "max by (stream, slot, database) (rate(walstream_slot_spilled_bytes_total[15m])) > 0.5",
			}
			for _, a := range alerts {
				rule, ok := got[a.Alert]
				switch {
				case a.Alert == "WalstreamErrors":
				case !ok:
					t.Errorf("%s left out", a.Alert)
				case changed[a.Alert] != "":
					if rule.Expr.String() != changed[a.Alert] {
						t.Errorf("%s: %s, want %s", a.Alert, rule.Expr.String(), changed[a.Alert])
					}
				case rule.Expr.String() != a.Expr || string(*rule.For) != a.For:
					t.Errorf("%s: %s for %s, want alerts.yml's %s for %s", a.Alert, rule.Expr.String(), *rule.For, a.Expr, a.For)
				}
			}
			if f := got["WalstreamSlotLagHigh"].For; f == nil || *f != "30m" {
				t.Errorf("WalstreamSlotLagHigh for %v, want 30m", f)
			}
		}},
		{"every alert off", `
metrics:
  prometheusRule:
    enabled: true
    alerts:
` + func() string {
			var b strings.Builder
			for _, a := range alerts {
				b.WriteString("      " + a.Alert + ": {enabled: false}\n")
			}
			return b.String()
		}(), func(t *testing.T, r rendered) {
			if n := len(r["PrometheusRule"]); n != 0 {
				t.Errorf("%d PrometheusRules with every alert off, want none", n)
			}
		}},
		{"token", `serviceAccount: {automountToken: true}`, func(t *testing.T, r rendered) {
			sa := r["ServiceAccount"][0].Value.(*corev1.ServiceAccount)
			if pod := r.pod(t); !deref(pod.AutomountServiceAccountToken) || !deref(sa.AutomountServiceAccountToken) {
				t.Errorf("automountServiceAccountToken %v on the pods, %v on the service account: want true", pod.AutomountServiceAccountToken, sa.AutomountServiceAccountToken)
			}
			if n := len(r["Role"]) + len(r["RoleBinding"]); n != 0 {
				t.Errorf("%d RBAC objects without rbac values, want none", n)
			}
		}},
		{"rbac", `
serviceAccount: {automountToken: true, name: walstream-sa}
rbac: {secrets: [db-creds, kafka-creds], configMaps: [connector-settings]}
`, func(t *testing.T, r rendered) {
			if len(r["Role"]) != 1 || len(r["RoleBinding"]) != 1 {
				t.Fatalf("%d Roles, %d RoleBindings, want one each", len(r["Role"]), len(r["RoleBinding"]))
			}
			role := r["Role"][0].Value.(*rbacv1.Role)
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"db-creds", "kafka-creds"}, Verbs: []string{"get"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"connector-settings"}, Verbs: []string{"get"}},
			}
			if !reflect.DeepEqual(role.Rules, want) {
				t.Errorf("Role rules %+v, want %+v", role.Rules, want)
			}
			rb := r["RoleBinding"][0].Value.(*rbacv1.RoleBinding)
			if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) ||
				!reflect.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "walstream-sa", Namespace: "streams"}}) {
				t.Errorf("RoleBinding %+v %+v, want the Role bound to the service account walstream-sa in streams", rb.RoleRef, rb.Subjects)
			}
			if pod := r.pod(t); pod.ServiceAccountName != "walstream-sa" {
				t.Errorf("the pods run as %q, want walstream-sa", pod.ServiceAccountName)
			}
		}},
		{"pod labels", `podLabels: {team: payments, app.kubernetes.io/name: other}`, func(t *testing.T, r rendered) {
			l := r["Deployment"][0].Value.(*appsv1.Deployment).Spec.Template.Labels
			if l["team"] != "payments" || l["app.kubernetes.io/name"] != "walstream" {
				t.Errorf("pod labels %v: want team added and the selector's name kept", l)
			}
		}},
		{"helm test", ``, func(t *testing.T, r rendered) {
			p := r.testPod(t)
			if p == nil {
				t.Fatal("no helm test pod")
			}
			svc := r["Service"][0].Value.(*corev1.Service)
			for k, v := range svc.Spec.Selector {
				if p.Labels[k] != v {
					return // the Service does not select it
				}
			}
			t.Errorf("the test pod's labels %v match the Service's selector %v: it would be scraped as walstream", p.Labels, svc.Spec.Selector)
		}},
		{"no helm test", `tests: {enabled: false}`, func(t *testing.T, r rendered) {
			if r.testPod(t) != nil {
				t.Error("a helm test pod with tests.enabled false")
			}
		}},
		{"helm test image", `tests: {image: {repository: registry.example.com/busybox, digest: "sha256:abc"}}`, func(t *testing.T, r rendered) {
			if got := r.testPod(t).Spec.Containers[0].Image; got != "registry.example.com/busybox@sha256:abc" {
				t.Errorf("test image %q, want the digest", got)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := make(rendered)
			for _, o := range render(t, valuesOf(c.vals)) {
				r[o.Kind] = append(r[o.Kind], o)
			}
			c.check(t, r)
		})
	}
}

// TestValuesDefaults: values.yaml has an entry for each alert of
// deploy/prometheus/alerts.yml, with a threshold where the alert's
// expression ends in a comparison with a number.
func TestValuesDefaults(t *testing.T) {
	alerts := fileAlerts(t)
	vals, err := ReadValues(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := vals["metrics"].(map[string]any)["prometheusRule"].(map[string]any)["alerts"].(map[string]any)
	if len(got) != len(alerts) {
		t.Errorf("values.yaml has %d alerts, alerts.yml %d", len(got), len(alerts))
	}
	for _, a := range alerts {
		v, ok := got[a.Alert].(map[string]any)
		if !ok {
			t.Errorf("values.yaml has no metrics.prometheusRule.alerts.%s", a.Alert)
			continue
		}
		if _, has := v["threshold"]; has != a.HasThreshold() {
			t.Errorf("metrics.prometheusRule.alerts.%s: threshold given %v, want %v (%s)", a.Alert, has, a.HasThreshold(), a.Expr)
		}
	}
}

// TestChartRefuses: values that cannot work fail helm template and helm
// install (which render as template does), with Helm 3 and Helm 4, with a
// message naming them. Those values.schema.json refuses, a key the chart
// does not know above all, fail helm lint too; lint renders past the
// templates' own checks (fail), which it does not report.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		vals   string
		schema bool // refused by values.schema.json
		want   []string
	}{
		{"unknown value", "replicaCont: 3", true, []string{"additional properties 'replicaCont' not allowed"}},
		{"unknown nested value", "kafka: {tls: {enabled: true, caSecrt: {name: ca}}}", true, []string{"at '/kafka/tls'", "'caSecrt' not allowed"}},
		{"unknown setting", "config: {lingr: 5ms}", true, []string{"at '/config'", "'lingr' not allowed"}},
		{"unknown setting of a stream", "config: {stream: null, streams: [{stream: a, slott: a}]}", true, []string{"at '/config/streams/0'", "'slott' not allowed"}},
		{"unknown router key", "config: {outbox: {table.field.evnt.id: id}}", true, []string{"at '/config/outbox'", "'table.field.evnt.id' not allowed"}},
		{"mistyped value", "replicaCount: two", true, []string{"at '/replicaCount'", "want null or integer"}},
		{"mistyped setting", "config: {max-batch-events: [1]}", true, []string{"at '/config/max-batch-events'"}},
		{"unknown alert", "metrics: {prometheusRule: {alerts: {WalstreamLag: {enabled: false}}}}", true, []string{"'WalstreamLag' not allowed"}},
		{"threshold of none", "metrics: {prometheusRule: {alerts: {WalstreamDown: {threshold: 1}}}}", true, []string{"at '/metrics/prometheusRule/alerts/WalstreamDown'", "'threshold' not allowed"}},
		{"twice", "config: {pg-url: 'postgres://x@db/app'}", false, []string{"pg-url is set both by the chart's postgres or kafka values and in config"}},
		{"memory", "resources: {limits: {memory: lots}}", false, []string{`resources.limits.memory "lots"`}},
		{"mapping flag", "connector: {config: '{}'}\nconfig: {outbox: {route.by.field: type}}", false, []string{"config.outbox: a mapping or a list cannot be a flag"}},
		{"tls secret", "kafka: {tls: {secret: ca}}", false, []string{"kafka.tls.secret is set but kafka.tls.enabled is not"}},
		{"tls ca", "kafka: {tls: {caSecret: {name: my-cluster-cluster-ca-cert}}}", false, []string{"kafka.tls.caSecret.name is set but kafka.tls.enabled is not"}},
		{"tls both forms", "kafka: {tls: {enabled: true, secret: ca, caSecret: {name: my-cluster-cluster-ca-cert}}}", false, []string{"kafka.tls.secret is the older form of kafka.tls.caSecret and kafka.tls.clientSecret"}},
		{"rbac without token", "rbac: {secrets: [db-creds]}", false, []string{"set serviceAccount.automountToken=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, h := range Helms {
				_, err := h.Template(chartDir, releaseName, "streams", valuesOf(c.vals)(t))
				if err == nil {
					t.Errorf("%s template with %s: no error, want one containing %q", h.Name, c.vals, c.want)
				} else if !containsAll(err.Error(), c.want) {
					t.Errorf("%s template with %s: %v, want an error containing %q", h.Name, c.vals, err, c.want)
				}
				if !c.schema {
					continue
				}
				if lint := strings.Join(h.Lint(chartDir, "streams", valuesOf(c.vals)(t)), "\n"); !containsAll(lint, c.want) {
					t.Errorf("%s lint with %s: %q, want an error containing %q", h.Name, c.vals, lint, c.want)
				}
			}
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
