package rtmetrics

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

func TestHandlerServesEveryName(t *testing.T) {
	runtime.GC() // at least one cycle and one pause to count
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	var got map[string]Sample
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, rec.Body)
	}
	for _, n := range Names {
		s, ok := got[n]
		if !ok {
			t.Errorf("%s missing", n)
			continue
		}
		if s.Value == nil && len(s.Counts) == 0 {
			t.Errorf("%s: neither a value nor a histogram", n)
		}
		if len(s.Counts) > 0 && len(s.Buckets) != len(s.Counts)+1 {
			t.Errorf("%s: %d bounds for %d buckets", n, len(s.Buckets), len(s.Counts))
		}
	}
	if c := got["/gc/cycles/total:gc-cycles"]; c.Value == nil || *c.Value < 1 {
		t.Errorf("no collection counted after runtime.GC: %+v", c)
	}
	var pauses uint64
	for _, n := range got["/sched/pauses/total/gc:seconds"].Counts {
		pauses += n
	}
	if pauses == 0 {
		t.Error("no pause counted after runtime.GC")
	}
}
