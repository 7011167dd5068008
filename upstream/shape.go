package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"trendgate/api"
	"unicode/utf8"
)

// The body each endpoint must have (checkBody):
//   - api.EndpointList: an object whose "data" is an array of objects;
//   - api.EndpointWhatsup: an object with a "config" object and a "summary"
//     string ("supportive"/"critical" arrays optional);
//   - api.EndpointSeries: an object with a "config" object and a "data"
//     array of objects;
//   - api.EndpointTSV: UTF-8 text whose first line starts with "time".

// contentType is the Content-Type assumed when the upstream sends none.
func defaultContentType(e api.Endpoint) string {
	if e == api.EndpointTSV {
		return "text/tab-separated-values; charset=utf-8"
	}
	return "application/json"
}

// accept is the Accept header sent for e.
func accept(e api.Endpoint) string {
	if e == api.EndpointTSV {
		return "text/tab-separated-values, text/plain;q=0.9"
	}
	return "application/json"
}

// checked is what validation learned from a body.
type checked struct {
	empty     bool  // unknown-topic answer: cache negatively
	generated int64 // config.generated, 0 when absent
}

// errShape is wrapped with ErrBadResponse by the caller; its details name
// the problem but never quote the body.
var errShape = errors.New("body does not match the expected shape")

// checkBody validates body for endpoint e.
func checkBody(e api.Endpoint, body []byte) (checked, error) {
	if e == api.EndpointTSV {
		return checkTSV(body)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
	}
	var c checked
	if e == api.EndpointWhatsup || e == api.EndpointSeries {
		cfg, ok := top["config"]
		if !ok || !isObject(cfg) {
			return checked{}, fmt.Errorf("%w: config is not an object", errShape)
		}
		c.generated = generatedOf(cfg)
	}
	switch e {
	case api.EndpointList, api.EndpointSeries:
		n, err := objectArrayLen(top["data"])
		if err != nil {
			return checked{}, fmt.Errorf("%w: data %v", errShape, err)
		}
		c.empty = n == 0
	case api.EndpointWhatsup:
		var summary string
		raw, ok := top["summary"]
		if !ok || json.Unmarshal(raw, &summary) != nil || isNull(raw) {
			return checked{}, fmt.Errorf("%w: summary is not a string", errShape)
		}
		for _, name := range []string{"supportive", "critical"} {
			if raw, ok := top[name]; ok && !isNull(raw) && !isArray(raw) {
				return checked{}, fmt.Errorf("%w: %s is not an array", errShape, name)
			}
		}
		c.empty = strings.TrimSpace(summary) == ""
	}
	return c, nil
}

// objectArrayLen returns the length of raw, which must be a JSON array of
// objects. An empty object ({}) counts as empty data: the upstream's
// unknown-topic answer seen in the wild (research/upstream-facts.md §2.3).
func objectArrayLen(raw json.RawMessage) (int, error) {
	if raw == nil {
		return 0, errors.New("is missing")
	}
	if isObject(raw) {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil && len(m) == 0 {
			return 0, nil
		}
		return 0, errors.New("is not an array")
	}
	var items []json.RawMessage
	if !isArray(raw) || json.Unmarshal(raw, &items) != nil {
		return 0, errors.New("is not an array")
	}
	for i, it := range items {
		if !isObject(it) {
			return 0, fmt.Errorf("item %d is not an object", i)
		}
	}
	return len(items), nil
}

// generatedOf returns config.generated when it is a positive number.
func generatedOf(cfg json.RawMessage) int64 {
	var v struct {
		Generated json.Number `json:"generated"`
	}
	if json.Unmarshal(cfg, &v) != nil {
		return 0
	}
	if n, err := v.Generated.Int64(); err == nil && n > 0 {
		return n
	}
	if f, err := v.Generated.Float64(); err == nil && f >= 1 && f < 1<<62 {
		return int64(f)
	}
	return 0
}

// checkTSV validates a TSV download.
func checkTSV(body []byte) (checked, error) {
	if !utf8.Valid(body) {
		return checked{}, fmt.Errorf("%w: TSV is not UTF-8", errShape)
	}
	if !bytes.HasPrefix(body, []byte("time")) {
		return checked{}, fmt.Errorf("%w: TSV header does not start with time", errShape)
	}
	return checked{}, nil
}

func firstByte(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func isObject(raw json.RawMessage) bool { return firstByte(raw) == '{' }
func isArray(raw json.RawMessage) bool  { return firstByte(raw) == '[' }
func isNull(raw json.RawMessage) bool   { return firstByte(raw) == 'n' }
