// Package workflows checks the repository's GitHub Actions workflows with
// actionlint, as its command does: syntax, expressions, the types of
// contexts, runner labels, action inputs, and each run: script with
// shellcheck where it is installed.
package workflows
