// Package deploytest holds the tests of what hookgate ships to run it: the
// container image, the Helm chart and the compose file. `make test-image`
// and `make check-chart` run the first two. It has no code of its own.
// docs/deployment.md says what each test proves.
package deploytest
