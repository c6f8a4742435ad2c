// Package doccheck holds the check that the repository's Markdown documents
// link only to files and anchors that exist (TestRelativeLinksResolve).
// It has no code of its own: the check is its test, run by make test and
// make check-docs.
package doccheck
