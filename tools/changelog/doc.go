// Package changelog reads CHANGELOG.md, kept as Keep a Changelog asks: a
// section per release, newest first, under an Unreleased one; a release's
// notes are its section. It only reads: cmd/release-notes prints a
// release's notes from it.
package changelog
