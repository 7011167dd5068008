package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"trendgate/api"
	"unicode/utf8"
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
		var top map[string]any
		if err := json.Unmarshal(body, &top); err != nil || top == nil {
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
