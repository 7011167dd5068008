package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 description of the public API (openapi.yaml
// in this package): the four routes with their exact parameters, both
// plans' response shapes, every error code with its status, and the
// headers. The admin listener serves it at /openapi.yaml, and a test in
// package proxy validates real gateway responses against it. Callers must
// not modify it.
//
//go:embed openapi.yaml
var OpenAPI []byte
