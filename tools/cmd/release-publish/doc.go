// Command release-publish publishes a release that make release built and
// signed in -dist: the image of every platform with its signature and
// attestations (walstream_<v>_signed_oci.tar), as cosign load pushes it,
// tagged with the version, and the chart (walstream-<v>.tgz) as helm push
// does. The registries' credentials are those of docker login.
//
//	release-publish -dist dist -version v0.1.0 \
//	  -repository ghcr.io/walstream/walstream -charts oci://ghcr.io/walstream/charts
package main
