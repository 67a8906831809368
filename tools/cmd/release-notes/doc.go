// Command release-notes prints a release's notes from CHANGELOG.md: the
// section of the version, or with -snapshot the Unreleased one.
//
//	release-notes -changelog CHANGELOG.md -version v0.1.0 > dist/RELEASE_NOTES.md
package main
