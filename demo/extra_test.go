package demo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// extraAnswer is the decoded answer of one of the extra endpoints.
type extraAnswer struct {
	Config map[string]any   `json:"config"`
	Data   []map[string]any `json:"data"`
}

func getExtra(t *testing.T, s *Server, target string, now time.Time) (int, extraAnswer) {
	t.Helper()
	status, body := s.AnswerAt(httptest.NewRequest(http.MethodGet, target, nil), now)
	var a extraAnswer
	if status == http.StatusOK {
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("GET %s: body is not JSON: %v", target, err)
		}
	}
	return status, a
}

func TestExtraEndpoints(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)

	t.Run("coins list", func(t *testing.T) {
		status, a := getExtra(t, s, "/api4/public/coins/list/v1", now)
		if status != http.StatusOK || len(a.Data) == 0 {
			t.Fatalf("status %d, %d coins; want 200 and coins", status, len(a.Data))
		}
		for i, c := range a.Data {
			if c["market_cap_rank"] != float64(i+1) || c["symbol"] == nil || c["price"] == nil {
				t.Errorf("coin %d = %v; want rank %d with a symbol and a price", i, c, i+1)
			}
		}
		if a.Config["generated"] == nil || a.Config["total_rows"] != float64(len(a.Data)) {
			t.Errorf("config = %v; want generated and total_rows %d", a.Config, len(a.Data))
		}
		_, top := getExtra(t, s, "/api4/public/coins/list/v1?limit=2&sort=market_cap_rank&desc=true", now)
		if len(top.Data) != 2 || top.Data[0]["market_cap_rank"] != float64(len(a.Data)) {
			t.Errorf("limit=2 desc: %v; want the 2 smallest coins, last rank first", top.Data)
		}
		if status, _ := getExtra(t, s, "/api4/public/coins/list/v1?limit=0", now); status != http.StatusBadRequest {
			t.Errorf("limit=0: status %d; want 400", status)
		}
	})

	t.Run("topic posts", func(t *testing.T) {
		status, a := getExtra(t, s, "/api4/public/topic/bitcoin/posts/v1", now)
		if status != http.StatusOK || len(a.Data) != postsPerTopic || a.Config["topic"] != "bitcoin" {
			t.Fatalf("status %d, %d posts, config %v; want 200, %d posts of bitcoin", status, len(a.Data), a.Config, postsPerTopic)
		}
		for _, p := range a.Data {
			sent, _ := p["post_sentiment"].(float64)
			if p["id"] == nil || p["creator_name"] == nil || sent < 1 || sent > 5 {
				t.Errorf("post %v; want an id, a creator and a sentiment in 1..5", p)
			}
		}
		if _, again := getExtra(t, s, "/api4/public/topic/bitcoin/posts/v1", now); len(again.Data) != len(a.Data) || again.Data[0]["id"] != a.Data[0]["id"] {
			t.Errorf("a second answer at the same time differs")
		}
		if status, none := getExtra(t, s, "/api4/public/topic/no%20such%20topic/posts/v1", now); status != http.StatusOK || len(none.Data) != 0 {
			t.Errorf("unknown topic: status %d, %d posts; want 200 and none", status, len(none.Data))
		}
	})

	t.Run("creators list", func(t *testing.T) {
		status, a := getExtra(t, s, "/api4/public/creators/list/v1", now)
		if status != http.StatusOK || len(a.Data) != numCreators {
			t.Fatalf("status %d, %d creators; want 200 and %d", status, len(a.Data), numCreators)
		}
		for i := 1; i < len(a.Data); i++ {
			if a.Data[i]["interactions_24h"].(float64) > a.Data[i-1]["interactions_24h"].(float64) {
				t.Fatalf("creator %d has more interactions than creator %d: not ranked", i, i-1)
			}
		}
		if a.Data[0]["creator_rank"] != float64(1) || a.Data[0]["creator_network"] == nil {
			t.Errorf("first creator = %v; want rank 1 with a network", a.Data[0])
		}
	})
}
