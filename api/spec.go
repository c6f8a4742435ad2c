package api

import _ "embed"

// Spec is the repository's openapi.yaml, byte for byte, as served at
// GET /openapi.yaml. It is never empty: the build fails if the file is
// missing.
//
//go:embed openapi.yaml
var Spec []byte
