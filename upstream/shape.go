package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"trendgate/api"
)

// The body each endpoint must have (checkBody):
//   - api.EndpointList: an object whose "data" is an array of objects;
//   - api.EndpointWhatsup: an object with a "config" object and a "summary"
//     string ("supportive"/"critical" arrays optional);
//   - api.EndpointSeries: an object with a "config" object and a "data"
//     array of objects;
//   - api.EndpointTSV: UTF-8 text whose first line starts with "time";
//   - api.EndpointRoute (a configured route): an object whose "data", when
//     present, is an array of objects, an object or null, and whose
//     "config", when present, is an object.

// contentType is the Content-Type assumed when the upstream sends none.
func defaultContentType(e api.Endpoint) string {
	if e.Spec().TSV {
		return "text/tab-separated-values; charset=utf-8"
	}
	return "application/json"
}

// accept is the Accept header sent for e.
func accept(e api.Endpoint) string {
	if e.Spec().TSV {
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

// checkBody validates body for endpoint e. A JSON body is read as a
// stream of its top-level members, and the items of "data" one at a time
// into one reused buffer, so checking a body allocates little beyond the
// largest item (decoding it into maps of raw values copied the body
// twice, which for a 1.45 MB series was 2.9 MB per fetch in flight). As
// with a map, a member given twice counts with its last value.
func checkBody(e api.Endpoint, body []byte) (checked, error) {
	switch {
	case e.Spec().TSV:
		return checkTSV(body)
	case e == api.EndpointRoute:
		return checkRoute(body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
	}
	var (
		raw             json.RawMessage // reused for every value not kept
		cfg, summary    json.RawMessage // the last "config" and "summary", copied
		hasCfg, hasData bool
		items           int
		dataErr         error // the last "data" is not an array of objects
		supBad, critBad bool  // the last "supportive" or "critical" is neither an array nor null
	)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
		}
		name, _ := t.(string)
		if name == "data" && e != api.EndpointWhatsup {
			hasData = true
			if items, dataErr, err = dataItems(dec, &raw); err != nil {
				return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
			}
			continue
		}
		if err := dec.Decode(&raw); err != nil {
			return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
		}
		switch name {
		case "config":
			cfg, hasCfg = bytes.Clone(raw), true
		case "summary":
			summary = bytes.Clone(raw)
		case "supportive":
			supBad = !isNull(raw) && !isArray(raw)
		case "critical":
			critBad = !isNull(raw) && !isArray(raw)
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
	}
	if _, err := dec.Token(); err != io.EOF {
		return checked{}, fmt.Errorf("%w: not a JSON object", errShape) // something after the object
	}
	var c checked
	if e == api.EndpointWhatsup || e == api.EndpointSeries {
		if !hasCfg || !isObject(cfg) {
			return checked{}, fmt.Errorf("%w: config is not an object", errShape)
		}
		c.generated = generatedOf(cfg)
	}
	switch e {
	case api.EndpointList, api.EndpointSeries:
		if !hasData {
			dataErr = errors.New("is missing")
		}
		if dataErr != nil {
			return checked{}, fmt.Errorf("%w: data %v", errShape, dataErr)
		}
		c.empty = items == 0
	case api.EndpointWhatsup:
		var text string
		if summary == nil || json.Unmarshal(summary, &text) != nil || isNull(summary) {
			return checked{}, fmt.Errorf("%w: summary is not a string", errShape)
		}
		if supBad {
			return checked{}, fmt.Errorf("%w: supportive is not an array", errShape)
		}
		if critBad {
			return checked{}, fmt.Errorf("%w: critical is not an array", errShape)
		}
		c.empty = strings.TrimSpace(text) == ""
	}
	return c, nil
}

// dataItems reads the value of "data" from dec: an array of objects (it
// returns their count), or an empty object (the upstream's unknown-topic
// answer seen in the wild for a topic it does not know: count 0).
// Items are decoded one at a time into *raw. shape reports a value of
// another shape; err, JSON that does not parse.
func dataItems(dec *json.Decoder, raw *json.RawMessage) (n int, shape, err error) {
	t, err := dec.Token()
	if err != nil {
		return 0, nil, err
	}
	switch t {
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := dec.Decode(raw); err != nil {
				return 0, nil, err
			}
			if shape == nil && !isObject(*raw) {
				shape = fmt.Errorf("item %d is not an object", i)
			}
			n++
		}
		_, err = dec.Token() // the closing ]
		return n, shape, err
	case json.Delim('{'):
		if !dec.More() {
			_, err = dec.Token() // the closing }
			return 0, nil, err
		}
		// A non-empty object: skip the rest of it, member by member.
		for dec.More() {
			if _, err := dec.Token(); err != nil {
				return 0, nil, err
			}
			if err := dec.Decode(raw); err != nil {
				return 0, nil, err
			}
		}
		_, err = dec.Token()
		return 0, errors.New("is not an array"), err
	}
	if _, ok := t.(json.Delim); ok {
		return 0, nil, errors.New("upstream: unexpected delimiter")
	}
	return 0, errors.New("is not an array"), nil // a string, number, bool or null
}

// checkRoute validates a configured route's answer (see checkBody). The
// routes are the upstream's less used endpoints, so it decodes the top
// level plainly rather than streaming it. An empty "data" is an answer,
// not an unknown topic: only a 404 is cached negatively.
func checkRoute(body []byte) (checked, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return checked{}, fmt.Errorf("%w: not a JSON object", errShape)
	}
	if d, ok := top["data"]; ok && !isNull(d) && !isObject(d) {
		var items []json.RawMessage
		if json.Unmarshal(d, &items) != nil {
			return checked{}, fmt.Errorf("%w: data is neither an array nor an object", errShape)
		}
		for i, it := range items {
			if !isObject(it) {
				return checked{}, fmt.Errorf("%w: data item %d is not an object", errShape, i)
			}
		}
	}
	var c checked
	if cfg, ok := top["config"]; ok {
		if !isObject(cfg) {
			return checked{}, fmt.Errorf("%w: config is not an object", errShape)
		}
		c.generated = generatedOf(cfg)
	}
	return c, nil
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
