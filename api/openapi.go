package api

import (
	_ "embed"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// OpenAPI is the OpenAPI 3.1 description of the public API (openapi.yaml
// in this package): the four routes with their exact parameters, both
// plans' response shapes, every error code with its status, and the
// headers. The admin listener serves it at /openapi.yaml, and a test in
// package proxy validates real gateway responses against it. Callers must
// not modify it.
//
//go:embed openapi.yaml
var OpenAPI []byte

// OpenAPIFor returns OpenAPI with one path per configured route of rs
// added, so the document the admin listener serves describes the routes in
// force: each operation has the route's path and query parameters (their
// rules as schemas), its cost and lifetimes, a JSON object answer and the
// errors every endpoint shares. Without routes it returns OpenAPI itself.
func OpenAPIFor(rs *Routes) ([]byte, error) {
	if len(rs.List()) == 0 {
		return OpenAPI, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(OpenAPI, &doc); err != nil {
		return nil, fmt.Errorf("api: openapi: %w", err)
	}
	paths := mappingValue(doc.Content[0], "paths")
	if paths == nil {
		return nil, errors.New("api: openapi: no paths")
	}
	for _, r := range rs.List() {
		var item yaml.Node
		if err := item.Encode(r.pathItem()); err != nil {
			return nil, fmt.Errorf("api: openapi: route %s: %w", r.Name, err)
		}
		paths.Content = append(paths.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: templateString(r.segs)}, &item)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("api: openapi: %w", err)
	}
	return out, nil
}

// mappingValue returns the value of key in the mapping node m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// pathItem is the OpenAPI path item of rt.
func (rt *Route) pathItem() map[string]any {
	var params []any
	for _, s := range rt.segs {
		if s.param == "" {
			continue
		}
		if s.rule == "topic" && s.param == "topic" {
			params = append(params, map[string]any{"$ref": "#/components/parameters/topic"})
			continue
		}
		schema := map[string]any{"type": "string"}
		switch s.rule {
		case "topic":
			schema["maxLength"], schema["pattern"] = 64, `^[A-Za-z0-9#$]+([ +][A-Za-z0-9#$]+)*$`
		case "id":
			schema["pattern"] = `^[0-9]{1,20}$`
		case "slug":
			schema["pattern"] = `^[A-Za-z0-9_-]{1,64}$`
		}
		params = append(params, map[string]any{"name": s.param, "in": "path", "required": true,
			"description": "Rule " + s.rule + ".", "schema": schema})
	}
	for _, qp := range rt.Query {
		params = append(params, map[string]any{"name": qp.Name, "in": "query", "schema": qp.schema()})
	}
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/responses/" + name} }
	caching := fmt.Sprintf("fresh for %s, then served stale for up to %s", rt.Fresh, rt.Stale)
	if rt.PassThrough() {
		caching = "never cached: every call is sent to the upstream"
	}
	op := map[string]any{
		"operationId": "route_" + rt.Name,
		"tags":        []string{"configured routes"},
		"summary":     "Configured route " + rt.Name + ", the upstream's answer as is.",
		"description": fmt.Sprintf("Operator-configured read endpoint. Cost %d; %s. "+
			"Keys of a limited plan get only the allowed fields of each data item, or 403 when the route has no allowlist.",
			max(rt.Cost, 1), caching),
		"responses": map[string]any{
			"200": map[string]any{"description": "The upstream's JSON object.",
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
			"304": ref("NotModified"), "400": ref("BadRequest"), "401": ref("Unauthorized"),
			"403": ref("Forbidden"), "404": ref("NotFound"), "405": ref("MethodNotAllowed"),
			"429": ref("TooManyRequests"), "500": ref("InternalError"), "502": ref("BadGateway"),
			"503": ref("ServiceUnavailable"), "504": ref("GatewayTimeout"),
		},
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	return map[string]any{"get": op}
}

// schema is the JSON schema of qp's accepted values.
func (qp QueryParam) schema() map[string]any {
	switch qp.Type {
	case QueryInteger:
		s := map[string]any{"type": "integer"}
		if qp.Min != nil {
			s["minimum"] = *qp.Min
		}
		if qp.Max != nil {
			s["maximum"] = *qp.Max
		}
		return s
	case QueryBool:
		return map[string]any{"type": "string", "enum": []string{"true", "false"}}
	case QueryEnum:
		return map[string]any{"type": "string", "enum": qp.Values}
	}
	return map[string]any{"type": "string", "maxLength": 128, "pattern": `^[A-Za-z0-9 _.,:#$-]+$`}
}
