// Package deploytest holds the tests of what hookgate ships to run it: the
// container image (Containerfile; TestImage, run by `make test-image`), the
// Helm chart (deploy/helm/hookgate; TestChart, run by `make check-chart`)
// and the compose file (deploy/compose.yaml; TestComposeFile). It has no
// code of its own; docs/deployment.md says what each test proves.
package deploytest
