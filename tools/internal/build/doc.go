// Package build builds walstream's binary for the tests of what a release
// ships: as a release does (Walstream), or as the repository's tests do (Host).
package build
