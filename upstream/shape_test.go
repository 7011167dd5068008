package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"trendgate/api"
)

// FuzzCheckBody checks that body validation never panics and that whatever
// it accepts really has the promised form.
func FuzzCheckBody(f *testing.F) {
	f.Add(uint8(api.EndpointList), []byte(listBody))                                          // valid list
	f.Add(uint8(api.EndpointList), []byte(`{"data":{}}`))                                     // unknown topic, object data
	f.Add(uint8(api.EndpointList), []byte(`{"data":[null]}`))                                 // null item
	f.Add(uint8(api.EndpointWhatsup), []byte(whatsupBody))                                    // valid whatsup
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{},"summary":null}`))                 // null summary
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{"generated":1e300},"summary":"s"}`)) // huge generated
	f.Add(uint8(api.EndpointSeries), []byte(seriesBody))                                      // valid series
	f.Add(uint8(api.EndpointSeries), []byte(`{"config":{},"data":[[]]}`))                     // row not an object
	f.Add(uint8(api.EndpointSeries), []byte(`{"config":{"generated":-5},"data":[]}`))         // negative generated
	f.Add(uint8(api.EndpointTSV), []byte("time\tinteractions\n2025-10-13 00:00\t1\n"))        // valid TSV
	f.Add(uint8(api.EndpointTSV), []byte("time\xff"))                                         // invalid UTF-8
	f.Add(uint8(api.EndpointList), []byte(`{"data":[]}   `))                                  // trailing whitespace
	// A number beyond float64 is valid JSON; the gateway checks shape, not
	// range, and forwards the bytes as they came.
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{"generAted":1e700},"summary":"0"}`))
	f.Fuzz(func(t *testing.T, shape uint8, body []byte) {
		s := api.Endpoint(shape%4 + 1)
		c, err := checkBody(s, body)
		if err != nil {
			if !errors.Is(err, errShape) {
				t.Fatalf("got error %v; want one wrapping errShape", err)
			}
			return
		}
		if c.generated < 0 {
			t.Errorf("got generated %d; want >= 0", c.generated)
		}
		if s == api.EndpointTSV {
			if !utf8.Valid(body) || !bytes.HasPrefix(body, []byte("time")) {
				t.Errorf("accepted TSV %q", body)
			}
			return
		}
		// UseNumber: a number out of float64's range (1e700) is still
		// JSON, and the check is not about range.
		var top map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&top); err != nil || top == nil {
			t.Fatalf("accepted %q which is not a JSON object", body)
		}
		if s != api.EndpointList {
			if _, ok := top["config"].(map[string]any); !ok {
				t.Errorf("accepted %q without a config object", body)
			}
		}
		if s == api.EndpointWhatsup {
			summary, ok := top["summary"].(string)
			if !ok {
				t.Errorf("accepted %q without a summary string", body)
			}
			if c.empty != (len(bytes.TrimSpace([]byte(summary))) == 0) {
				t.Errorf("got empty %v for summary %q", c.empty, summary)
			}
			return
		}
		switch data := top["data"].(type) {
		case []any:
			for _, it := range data {
				if _, ok := it.(map[string]any); !ok {
					t.Errorf("accepted %q with a non-object item", body)
				}
			}
			if c.empty != (len(data) == 0) {
				t.Errorf("got empty %v for %d items", c.empty, len(data))
			}
		case map[string]any:
			if len(data) != 0 || !c.empty {
				t.Errorf("accepted %q with object data", body)
			}
		default:
			t.Errorf("accepted %q without a data array", body)
		}
	})
}

// FuzzCheckBodyAsMaps checks the streaming checkBody against the version it
// replaced, which decoded the body into maps of raw values (kept below as
// the reference): the same bodies are accepted, with the same findings.
func FuzzCheckBodyAsMaps(f *testing.F) {
	f.Add(uint8(api.EndpointSeries), []byte(seriesBody))                                       // valid series
	f.Add(uint8(api.EndpointList), []byte(`{"data":[{}],"data":[]}`))                          // duplicate member: the last counts
	f.Add(uint8(api.EndpointList), []byte(`{"data":[1],"data":{}}`))                           // bad, then empty object
	f.Add(uint8(api.EndpointList), []byte(`{"data":{"a":1}}`))                                 // non-empty object data
	f.Add(uint8(api.EndpointList), []byte(`{"data":[{}]} x`))                                  // trailing garbage
	f.Add(uint8(api.EndpointList), []byte(`{"data":1e999}`))                                   // scalar data out of range
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{},"summary":"s","critical":{}}`))     // critical not an array
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{},"summary":"s","supportive":null}`)) // null list
	f.Add(uint8(api.EndpointWhatsup), []byte(`{"config":{},"summary":"s","data":5}`))          // data ignored for whatsup
	f.Add(uint8(api.EndpointSeries), []byte(`{"config":{"generated":17},"config":[],"data":[]}`))
	f.Add(uint8(api.EndpointSeries), []byte(`{"\u0064ata":[],"config":{}}`)) // escaped member name
	f.Add(uint8(api.EndpointList), []byte(`null`))                           // not an object
	f.Fuzz(func(t *testing.T, shape uint8, body []byte) {
		s := api.Endpoint(shape%3 + 1) // the JSON shapes
		got, err := checkBody(s, body)
		want, wantErr := checkBodyAsMaps(s, body)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("checkBody(%v, %q) error %v; the map version's %v", s, body, err, wantErr)
		}
		if err == nil && got != want {
			t.Errorf("checkBody(%v, %q) = %+v; the map version's %+v", s, body, got, want)
		}
	})
}

// checkBodyAsMaps is checkBody as it was before it streamed: the
// reference FuzzCheckBodyAsMaps compares with.
func checkBodyAsMaps(e api.Endpoint, body []byte) (checked, error) {
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
		raw := top["data"]
		if raw == nil {
			return checked{}, fmt.Errorf("%w: data is missing", errShape)
		}
		if isObject(raw) {
			var m map[string]json.RawMessage
			if json.Unmarshal(raw, &m) == nil && len(m) == 0 {
				c.empty = true
				return c, nil
			}
			return checked{}, fmt.Errorf("%w: data is not an array", errShape)
		}
		var items []json.RawMessage
		if !isArray(raw) || json.Unmarshal(raw, &items) != nil {
			return checked{}, fmt.Errorf("%w: data is not an array", errShape)
		}
		for _, it := range items {
			if !isObject(it) {
				return checked{}, fmt.Errorf("%w: data item is not an object", errShape)
			}
		}
		c.empty = len(items) == 0
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

func TestCheckRouteBody(t *testing.T) {
	for _, tc := range []struct {
		body      string
		ok        bool
		generated int64
	}{
		{`{"config":{"generated":1764000000},"data":[{"id":1},{"id":2}]}`, true, 1764000000},
		{`{"data":[]}`, true, 0}, // an empty list is an answer
		{`{"data":{"symbol":"BTC"}}`, true, 0},
		{`{"data":null,"config":{}}`, true, 0},
		{`{"anything":"else"}`, true, 0},
		{`{"data":[1,2]}`, false, 0},
		{`{"data":"text"}`, false, 0},
		{`{"config":[],"data":[]}`, false, 0},
		{`[{"id":1}]`, false, 0},
		{`null`, false, 0},
		{`{"data":[]} trailing`, false, 0},
		{`<html>`, false, 0},
	} {
		c, err := checkBody(api.EndpointRoute, []byte(tc.body))
		if (err == nil) != tc.ok || c.generated != tc.generated || c.empty {
			t.Errorf("checkBody(route, %s) = %+v, %v; want ok %v, generated %d, never empty", tc.body, c, err, tc.ok, tc.generated)
		}
	}
}
