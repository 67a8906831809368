// Command release-chart packages walstream's Helm chart as `helm package`
// does, with the release's version, but reproducibly: every entry dated
// the commit's time, in name order, with no time in the gzip header.
//
//	release-chart -chart deploy/helm/walstream -version v0.1.0 -epoch $SOURCE_DATE_EPOCH -out dist
package main
