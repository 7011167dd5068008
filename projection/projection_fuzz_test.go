package projection

import (
	"encoding/json"
	"errors"
	"testing"

	"trendgate/api"
)

// FuzzProjection projects arbitrary input for each endpoint with the
// limited test plan. Apply must never panic; it must reject input that is
// not valid JSON; it must never report ErrLeak (that would be a
// projector bug); and whatever it returns must be JSON whose top-level keys
// and data item keys, decoded by encoding/json, are all allowed.
func FuzzProjection(f *testing.F) {
	seeds := []struct {
		body string
		ep   uint8
	}{
		// The realistic fixtures, one per endpoint.
		{testListBody, uint8(api.EndpointList)},
		{testSeriesBody, uint8(api.EndpointSeries)},
		{testWhatsup, uint8(api.EndpointWhatsup)},
		// A non-asset series with no config.
		{`{"data":[` + testSocialRow + `]}`, uint8(api.EndpointSeries)},
		// Escaped keys that decode to allowed and forbidden names.
		{`{"data":[{"\u0074opic":"a","interactions\u005f24h":1}]}`, uint8(api.EndpointList)},
		// An upstream data_mode that must be replaced, escaped.
		{`{"config":{"data_mod\u0065":"full"},"summary":"s"}`, uint8(api.EndpointWhatsup)},
		// Duplicate top-level keys.
		{`{"data":[{"time":1}],"data":[{"close":2}],"config":{},"config":{}}`, uint8(api.EndpointSeries)},
		// Nested arrays hiding forbidden keys inside a data item.
		{`{"data":[[{"interactions_24h":1}]]}`, uint8(api.EndpointList)},
		// Numbers at the edge of the grammar.
		{`{"data":[{"topic_rank":-0.0e-0,"num_posts":1E+21}]}`, uint8(api.EndpointList)},
		// Malformed: truncated, trailing data, bad escape.
		{`{"config":{},"data":[{"time":1`, uint8(api.EndpointSeries)},
		{`{"data":[]}]`, uint8(api.EndpointList)},
		{`{"summary":"\q"}`, uint8(api.EndpointWhatsup)},
		// TSV bodies pass through untouched.
		{"time\tinteractions\n1760572800\t3542118\n", uint8(api.EndpointTSV)},
		// An unknown endpoint fails closed.
		{`{}`, 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.ep)
	}
	p := mustCompile(f, testLimitedPlan())
	f.Fuzz(func(t *testing.T, body []byte, epByte uint8) {
		ep := api.Endpoint(epByte % 6)
		in := append([]byte(nil), body...)
		out, err := p.Apply(ep, body)
		if string(in) != string(body) {
			t.Fatalf("Apply modified its input")
		}
		if ep == api.EndpointTSV {
			if err != nil || string(out) != string(body) {
				t.Fatalf("Apply(tsv) = %q, %v; want the body unchanged", out, err)
			}
			return
		}
		known := ep == api.EndpointList || ep == api.EndpointSeries || ep == api.EndpointWhatsup
		if !known {
			if !errors.Is(err, ErrLeak) {
				t.Fatalf("Apply(%d) error = %v; want ErrLeak", ep, err)
			}
			return
		}
		if errors.Is(err, ErrLeak) {
			t.Fatalf("Apply(%s, %q): projector bug caught by verify: %v", ep, body, err)
		}
		if err != nil {
			if out != nil {
				t.Fatalf("Apply returned output with an error")
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Apply(%s, %q) accepted invalid JSON", ep, body)
		}
		checkProjected(t, p, ep, out)
	})
}

// checkProjected checks a limited output with encoding/json alone.
func checkProjected(t *testing.T, p *Projection, ep api.Endpoint, out []byte) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(out, &top); err != nil {
		t.Fatalf("output %q is not a JSON object: %v", out, err)
	}
	items := p.list
	if ep == api.EndpointSeries {
		items = p.series
	}
	for k, v := range top {
		switch {
		case k == "config" && ep != api.EndpointList:
			var cfg map[string]json.RawMessage
			if err := json.Unmarshal(v, &cfg); err != nil {
				t.Fatalf("config %s is not an object: %v", v, err)
			}
			if string(cfg["data_mode"]) != `"limited"` {
				t.Fatalf("config %s: data_mode = %s; want \"limited\"", v, cfg["data_mode"])
			}
		case k == "data" && ep != api.EndpointWhatsup:
			var rows []map[string]json.RawMessage
			if err := json.Unmarshal(v, &rows); err != nil {
				t.Fatalf("data %s is not an array of objects: %v", v, err)
			}
			for _, row := range rows {
				for rk := range row {
					if !items.has(rk) {
						t.Fatalf("output %s: data item key %q is not allowed", out, rk)
					}
				}
			}
		case ep == api.EndpointWhatsup && p.whatsup.has(k):
		default:
			t.Fatalf("output %s: top-level key %q is not allowed", out, k)
		}
	}
	if _, ok := top["config"]; ep != api.EndpointList && !ok {
		t.Fatalf("output %s has no config", out)
	}
}

// FuzzProjectionScanner checks the projector's JSON scanner against
// encoding/json: projSkipValue accepts exactly what json.Valid accepts.
func FuzzProjectionScanner(f *testing.F) {
	// Valid values of every kind.
	f.Add([]byte(`{"a":[1,-2.5e+3,true,false,null,"x\u00e9\n"]}`))
	f.Add([]byte(` [ ] `))
	f.Add([]byte(`"\ud800"`))
	// Invalid: leading zero, bare fraction, bad literal, raw control byte.
	f.Add([]byte(`01`))
	f.Add([]byte(`.5`))
	f.Add([]byte(`tru`))
	f.Add([]byte("\"a\x01\""))
	// Invalid UTF-8 inside a string, which encoding/json accepts.
	f.Add([]byte("\"\xff\""))
	f.Fuzz(func(t *testing.T, b []byte) {
		i := projSkipWS(b, 0)
		end, err := projSkipValue(b, i, 0)
		got := err == nil && projSkipWS(b, end) == len(b)
		if want := json.Valid(b); got != want {
			t.Fatalf("scanner accepts %q = %v (err %v); json.Valid = %v", b, got, err, want)
		}
	})
}
