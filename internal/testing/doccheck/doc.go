// Package doccheck holds the check that the repository's Markdown
// documents link only to files and anchors that exist. It has no code of
// its own. The check is its test, which make test and make check-docs run.
package doccheck
