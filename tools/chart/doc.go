// Package chart renders walstream's Helm chart (deploy/helm/walstream)
// as `helm template` does, with Helm 3 and Helm 4, and decodes every
// object it renders strictly into the Kubernetes API's types, for its
// tests and for the plain manifests of deploy/kubernetes, which are its
// rendering. It packages nothing: cmd/release-chart does.
package chart
