package series_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"trendgate/api"
	"trendgate/series"
)

// FuzzCut feeds arbitrary bodies to Cut for a fixed hourly window: it
// never panics, and whatever it accepts it turns into a JSON object whose
// rows all lie inside the window and are no more than the body had.
func FuzzCut(f *testing.F) {
	const start, end = 1794906000, 1794913200 // three hours
	// A well-formed wider answer, rows around the window.
	f.Add([]byte(`{"config":{"topic":"bitcoin","id":"bitcoin","interval":"1w","start":1794441600,"end":1795092015,"bucket":"hour","metrics":[],"generated":1795084815},"data":[{"time":1794902400,"x":1},{"time":1794906000,"x":2},{"time":1794913200,"x":3},{"time":1794916800,"x":4}]}` + "\n"))
	// No rows at all (an unknown topic's answer).
	f.Add([]byte(`{"config":{"start":1794441600,"bucket":"hour"},"data":[]}`))
	// The wrong bucket, the wrong order, not an object, strings inside rows.
	f.Add([]byte(`{"config":{"start":1,"bucket":"day"},"data":[{"time":1794906000}]}`))
	f.Add([]byte(`{"config":{"start":1,"bucket":"hour"},"data":[{"time":1794913200},{"time":1794906000}]}`))
	f.Add([]byte(`[1,2,3]`))
	f.Add([]byte(`{"config":{"start":1,"bucket":"hour","topic":"a\"b}"},"data":[{"time":1794906000,"s":"]},{"}]}`))
	narrow := parseFor(f, start, end)
	f.Fuzz(func(t *testing.T, body []byte) {
		out, rows, err := series.Cut(body, narrow, series.Reading{StartInside: series.Include, EndOn: series.Include, EndInside: series.Include})
		if err != nil {
			if out != nil {
				t.Fatalf("an error (%v) with a body", err)
			}
			return
		}
		var v struct {
			Config map[string]json.RawMessage `json:"config"`
			Data   []struct {
				Time *int64 `json:"time"`
			} `json:"data"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("cut %q from %q: not JSON: %v", out, body, err)
		}
		if len(v.Data) != rows {
			t.Fatalf("reported %d rows, wrote %d", rows, len(v.Data))
		}
		for _, r := range v.Data {
			if r.Time == nil || *r.Time < start || *r.Time > end {
				t.Fatalf("row outside [%d, %d] in %q", start, end, out)
			}
		}
		if _, ok := v.Config["interval"]; ok {
			t.Fatalf("interval kept in %q", out)
		}
	})
}

// parseFor is the canonical hourly request for [start, end].
func parseFor(f *testing.F, start, end int64) api.Request {
	target := "/api4/public/topic/bitcoin/time-series/v1?start=" + strconv.FormatInt(start, 10) + "&end=" + strconv.FormatInt(end, 10)
	q, err := api.ParseRequest(httptest.NewRequest(http.MethodGet, target, nil), time.Unix(end+600, 0))
	if err != nil {
		f.Fatal(err)
	}
	return q
}
