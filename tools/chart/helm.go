package chart

import (
	"fmt"

	helm3loader "helm.sh/helm/v3/pkg/chart/loader"
	helm3chartutil "helm.sh/helm/v3/pkg/chartutil"
	helm3engine "helm.sh/helm/v3/pkg/engine"
	helm3lint "helm.sh/helm/v3/pkg/lint"
	helm3support "helm.sh/helm/v3/pkg/lint/support"
	helm4common "helm.sh/helm/v4/pkg/chart/common"
	helm4util "helm.sh/helm/v4/pkg/chart/common/util"
	helm4lint "helm.sh/helm/v4/pkg/chart/v2/lint"
	helm4support "helm.sh/helm/v4/pkg/chart/v2/lint/support"
	helm4loader "helm.sh/helm/v4/pkg/chart/v2/loader"
	helm4engine "helm.sh/helm/v4/pkg/engine"
)

// KubeVersion is the Kubernetes version the chart is linted and rendered
// for: one its kubeVersion constraint admits.
const KubeVersion = "v1.30.0"

// Helm is one major version of Helm, as a library: what its commands do
// with a chart, without a cluster.
type Helm struct {
	Name string
	// Lint returns what `helm lint` reports worse than information, each
	// as it prints it.
	Lint func(dir, namespace string, vals map[string]any) []string
	// Template renders the chart with the functions `helm template` and
	// `helm install` (--dry-run or not) render it with: the values
	// coalesced with values.yaml and checked against values.schema.json
	// (ToRenderValues), then the templates (engine.Render), hooks
	// included. It returns each file's documents by its path in the chart.
	Template func(dir, name, namespace string, vals map[string]any) (map[string]string, error)
}

// Helms are the versions of Helm the chart is checked with: users run
// both.
var Helms = []Helm{
	{Name: "Helm 3", Lint: lint3, Template: template3},
	{Name: "Helm 4", Lint: lint4, Template: template4},
}

func lint3(dir, namespace string, vals map[string]any) []string {
	kube, err := helm3chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, m := range helm3lint.AllWithKubeVersion(dir, vals, namespace, kube).Messages {
		if m.Severity > helm3support.InfoSev {
			out = append(out, m.Error())
		}
	}
	return out
}

func lint4(dir, namespace string, vals map[string]any) []string {
	kube, err := helm4common.ParseKubeVersion(KubeVersion)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, m := range helm4lint.RunAll(dir, vals, namespace, helm4lint.WithKubeVersion(kube)).Messages {
		if m.Severity > helm4support.InfoSev {
			out = append(out, m.Error())
		}
	}
	return out
}

func template3(dir, name, namespace string, vals map[string]any) (map[string]string, error) {
	ch, err := helm3loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	caps := helm3chartutil.DefaultCapabilities.Copy()
	kube, err := helm3chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kube
	rv, err := helm3chartutil.ToRenderValues(ch, vals, helm3chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	return helm3engine.Render(ch, rv)
}

func template4(dir, name, namespace string, vals map[string]any) (map[string]string, error) {
	ch, err := helm4loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	caps := helm4common.DefaultCapabilities.Copy()
	kube, err := helm4common.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, err
	}
	caps.KubeVersion = *kube
	rv, err := helm4util.ToRenderValues(ch, vals, helm4common.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	return helm4engine.Render(ch, rv)
}
