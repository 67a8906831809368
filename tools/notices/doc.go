// Package notices makes THIRD_PARTY_NOTICES: every module the walstream
// binary links on the platforms a release builds, with its licence, found
// in the module and classified by its text, and the licence's text itself,
// as the MIT and BSD licences ask of a binary distribution and Apache's
// asks of its NOTICE files.
package notices
