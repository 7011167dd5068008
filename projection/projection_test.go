package projection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"trendgate/api"
)

// testLimitedPlan mirrors the built-in "limited" plan (config.Default): list
// without interactions_24h, series with time and the social metrics,
// whatsup with summary only.
func testLimitedPlan() Plan {
	return Plan{
		DataMode: "limited",
		Fields: Fields{
			List: []string{
				"topic", "title", "topic_rank", "topic_rank_1h_previous",
				"topic_rank_24h_previous", "num_contributors", "num_posts",
			},
			Whatsup: []string{"summary"},
			Series: []string{
				"time", "contributors_active", "contributors_created",
				"posts_active", "posts_created", "interactions", "sentiment", "spam",
			},
			TSV: []string{"interactions", "posts_active", "contributors_active", "sentiment"},
		},
	}
}

func mustCompile(t testing.TB, plan Plan) *Projection {
	t.Helper()
	p, err := Compile(plan)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

// Fixtures shaped like the upstream's bodies (docs/api.md and
// api/openapi.yaml describe them).
const (
	// An hourly bitcoin row: all 19 fields, market fields included.
	testAssetRow = `{"time":1760572800,"contributors_active":27113,"contributors_created":1310,` +
		`"interactions":3542118,"posts_active":55873,"posts_created":2011,"sentiment":78,"spam":331,` +
		`"alt_rank":203,"circulating_supply":19934512,"close":122980.5,"galaxy_score":61,` +
		`"high":123101.25,"low":122817.04,"market_cap":2452811000000,"market_dominance":61.4,` +
		`"open":122980.5,"social_dominance":24.77,"volume_24h":54123000000}`
	// An hourly #ai row: only the seven social fields.
	testSocialRow = `{"time":1760576400,"contributors_active":3102,"contributors_created":412,` +
		`"interactions":180244,"posts_active":1733,"posts_created":530,"sentiment":81,"spam":12}`
	testSeriesConfig = `{"topic":"bitcoin","id":"bitcoin","name":"Bitcoin","symbol":"BTC",` +
		`"interval":"1w","start":1759968000,"end":1760662080,"bucket":"hour","metrics":[],"generated":1760654880}`
	testListItem1 = `{"topic":"youtube","title":"YouTube","topic_rank":1,"topic_rank_1h_previous":1,` +
		`"topic_rank_24h_previous":2,"num_contributors":385112,"num_posts":767003,"interactions_24h":3300000000}`
	testListItem2 = `{"topic":"bitcoin","title":"Bitcoin","topic_rank":20,"topic_rank_1h_previous":22,` +
		`"topic_rank_24h_previous":53,"num_contributors":91044,"num_posts":265117,"interactions_24h":84000000}`
	testWhatsup = `{"config":{"topic":"bitcoin","generated":1760654880},` +
		`"summary":"Bitcoin holds near $123k as ETF inflows continue.",` +
		`"supportive":[{"title":"Bitcoin Adoption","description":"More firms hold BTC.","percent":60}],` +
		`"critical":[{"title":"Regulation","description":"New rules proposed.","percent":12}]}`
)

var (
	testSeriesBody = `{"config":` + testSeriesConfig + `,"data":[` + testAssetRow + `]}`
	testListBody   = `{"data":[` + testListItem1 + `,` + testListItem2 + `]}`
)

// The projected forms of the fixtures under testLimitedPlan.
const (
	testAssetRowLimited = `{"time":1760572800,"contributors_active":27113,"contributors_created":1310,` +
		`"interactions":3542118,"posts_active":55873,"posts_created":2011,"sentiment":78,"spam":331}`
	testListItem1Limited = `{"topic":"youtube","title":"YouTube","topic_rank":1,"topic_rank_1h_previous":1,` +
		`"topic_rank_24h_previous":2,"num_contributors":385112,"num_posts":767003}`
	testListItem2Limited = `{"topic":"bitcoin","title":"Bitcoin","topic_rank":20,"topic_rank_1h_previous":22,` +
		`"topic_rank_24h_previous":53,"num_contributors":91044,"num_posts":265117}`
	testSeriesConfigLimited = `{"topic":"bitcoin","id":"bitcoin","name":"Bitcoin","symbol":"BTC",` +
		`"interval":"1w","start":1759968000,"end":1760662080,"bucket":"hour","metrics":[],` +
		`"generated":1760654880,"data_mode":"limited"}`
)

func TestCompile(t *testing.T) {
	tests := []struct {
		name        string
		mode        string
		wantLimited bool
		wantErr     bool
	}{
		{name: "full", mode: "full"},
		{name: "limited", mode: "limited", wantLimited: true},
		{name: "empty mode is refused", mode: "", wantErr: true},
		{name: "unknown mode", mode: "partial", wantErr: true},
		{name: "modes are case-sensitive", mode: "Limited", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := testLimitedPlan()
			plan.DataMode = tc.mode
			p, err := Compile(plan)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Compile(%q) error = %v; want error %v", tc.mode, err, tc.wantErr)
			}
			if err != nil {
				if p != nil {
					t.Errorf("Compile(%q) = %p with an error; want nil", tc.mode, p)
				}
				return
			}
			if got := p.Limited(); got != tc.wantLimited {
				t.Errorf("Limited() = %v; want %v", got, tc.wantLimited)
			}
			if tc.mode == "full" && p != nil {
				t.Errorf("Compile(full) = %p; want nil", p)
			}
		})
	}
}

func TestProjectionFullReturnsBodyItself(t *testing.T) {
	full := mustCompile(t, Plan{DataMode: "full"})
	limited := mustCompile(t, testLimitedPlan())
	tests := []struct {
		name string
		p    *Projection
		ep   api.Endpoint
		body string
	}{
		{"full list", full, api.EndpointList, testListBody},
		{"full series", full, api.EndpointSeries, testSeriesBody},
		{"full whatsup", full, api.EndpointWhatsup, testWhatsup},
		{"full tsv", full, api.EndpointTSV, "time\tinteractions\n1760572800\t3542118\n"},
		{"full passes even malformed bodies", full, api.EndpointSeries, `{"data":[`},
		{"limited tsv is not projected", limited, api.EndpointTSV, "time\tsentiment\n1760572800\t78\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			got, err := tc.p.Apply(tc.ep, body)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(got) != len(body) || &got[0] != &body[0] {
				t.Errorf("Apply returned a different slice; want the body itself")
			}
		})
	}
}

func TestProjectionApply(t *testing.T) {
	limited := mustCompile(t, testLimitedPlan())
	tests := []struct {
		name string
		ep   api.Endpoint
		body string
		want string
	}{
		{
			name: "list drops interactions_24h",
			ep:   api.EndpointList,
			body: testListBody,
			want: `{"data":[` + testListItem1Limited + `,` + testListItem2Limited + `]}`,
		},
		{
			name: "list drops other top-level keys, config included",
			ep:   api.EndpointList,
			body: `{"config":{"generated":1},"data":[{"topic":"ai"}],"total":1}`,
			want: `{"data":[{"topic":"ai"}]}`,
		},
		{
			name: "list item with only unknown fields becomes empty",
			ep:   api.EndpointList,
			body: `{"data":[{"interactions_24h":5,"social_dominance":5.67,"interactions_1h":1}]}`,
			want: `{"data":[{}]}`,
		},
		{
			name: "list with empty data",
			ep:   api.EndpointList,
			body: `{"data":[]}`,
			want: `{"data":[]}`,
		},
		{
			name: "list with null data",
			ep:   api.EndpointList,
			body: `{"data":null}`,
			want: `{"data":null}`,
		},
		{
			name: "list with whitespace everywhere",
			ep:   api.EndpointList,
			body: " \n{ \"data\" : [ { \"topic\" : \"ai\" ,\t\"interactions_24h\" : 7 } ] , \"x\" : { } }\r\n",
			want: `{"data":[{"topic":"ai"}]}`,
		},
		{
			name: "series asset row keeps social fields and config",
			ep:   api.EndpointSeries,
			body: testSeriesBody,
			want: `{"config":` + testSeriesConfigLimited + `,"data":[` + testAssetRowLimited + `]}`,
		},
		{
			name: "series non-asset row is unchanged",
			ep:   api.EndpointSeries,
			body: `{"config":{"topic":"#ai","id":"#ai"},"data":[` + testSocialRow + `,` + testAssetRow + `]}`,
			want: `{"config":{"topic":"#ai","id":"#ai","data_mode":"limited"},"data":[` +
				testSocialRow + `,` + testAssetRowLimited + `]}`,
		},
		{
			name: "series drops unknown top-level keys",
			ep:   api.EndpointSeries,
			body: `{"remote_api":"danode2-13","config":{},"data":[],"debug":{"x":1}}`,
			want: `{"config":{"data_mode":"limited"},"data":[]}`,
		},
		{
			name: "series upstream data_mode is replaced",
			ep:   api.EndpointSeries,
			body: `{"config":{"data_mode":"full","topic":"ai"},"data":[]}`,
			want: `{"config":{"topic":"ai","data_mode":"limited"},"data":[]}`,
		},
		{
			name: "series without config gets one",
			ep:   api.EndpointSeries,
			body: `{"data":[{"time":1}]}`,
			want: `{"data":[{"time":1}],"config":{"data_mode":"limited"}}`,
		},
		{
			name: "series row keys keep their order",
			ep:   api.EndpointSeries,
			body: `{"config":{},"data":[{"spam":1,"close":2,"time":3,"sentiment":4}]}`,
			want: `{"config":{"data_mode":"limited"},"data":[{"spam":1,"time":3,"sentiment":4}]}`,
		},
		{
			name: "series nested values are copied as written",
			ep:   api.EndpointSeries,
			body: `{"config":{"metrics":[ "a" , {"b" : [1.50, -0e+00]} ]},"data":[{"time":{"x" : [ 1e21 ]}}]}`,
			want: `{"config":{"metrics":[ "a" , {"b" : [1.50, -0e+00]} ]` + `,"data_mode":"limited"},` +
				`"data":[{"time":{"x" : [ 1e21 ]}}]}`,
		},
		{
			name: "escaped keys are compared decoded",
			ep:   api.EndpointSeries,
			body: `{"config":{"data_mod\u0065":"full"},"data":[{"\u0074ime":1,"inter\u0061ctions_24h":2,"close\u0000":3}]}`,
			want: `{"config":{"data_mode":"limited"},"data":[{"\u0074ime":1}]}`,
		},
		{
			name: "whatsup keeps summary and config only",
			ep:   api.EndpointWhatsup,
			body: testWhatsup,
			want: `{"config":{"topic":"bitcoin","generated":1760654880,"data_mode":"limited"},` +
				`"summary":"Bitcoin holds near $123k as ETF inflows continue."}`,
		},
		{
			name: "whatsup without config gets one",
			ep:   api.EndpointWhatsup,
			body: `{"summary":"s","critical":[]}`,
			want: `{"summary":"s","config":{"data_mode":"limited"}}`,
		},
		{
			name: "whatsup data key is dropped",
			ep:   api.EndpointWhatsup,
			body: `{"config":{},"data":[{"summary":"x"}],"summary":null}`,
			want: `{"config":{"data_mode":"limited"},"summary":null}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			got, err := limited.Apply(tc.ep, body)
			if err != nil {
				t.Fatalf("Apply(%s): %v", tc.ep, err)
			}
			if string(got) != tc.want {
				t.Errorf("Apply(%s) =\n%s\nwant\n%s", tc.ep, got, tc.want)
			}
			if string(body) != tc.body {
				t.Errorf("Apply modified its input: got %s; want %s", body, tc.body)
			}
			if spare := cap(got) - len(got); spare > len(got)/8 {
				t.Errorf("output has %d bytes of spare capacity for %d bytes; want at most %d", spare, len(got), len(got)/8)
			}
		})
	}
}

// TestProjectionLimitedNeverLeaks decodes the limited outputs of realistic
// bodies and looks for every field the limited plan must not deliver.
func TestProjectionLimitedNeverLeaks(t *testing.T) {
	limited := mustCompile(t, testLimitedPlan())
	market := []string{
		"alt_rank", "circulating_supply", "close", "galaxy_score", "high", "low",
		"market_cap", "market_dominance", "open", "social_dominance", "volume_24h",
	}
	tests := []struct {
		name      string
		ep        api.Endpoint
		body      string
		forbidden []string
	}{
		{"list", api.EndpointList, testListBody, []string{"interactions_24h"}},
		{"series", api.EndpointSeries, `{"config":` + testSeriesConfig + `,"data":[` +
			testAssetRow + `,` + testSocialRow + `,` + testAssetRow + `]}`, market},
		{"whatsup", api.EndpointWhatsup, testWhatsup, []string{"supportive", "critical", "Bitcoin Adoption", "percent"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limited.Apply(tc.ep, []byte(tc.body))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for _, f := range tc.forbidden {
				if bytes.Contains(got, []byte(f)) {
					t.Errorf("output contains %q: %s", f, got)
				}
			}
			var decoded struct {
				Config map[string]any   `json:"config"`
				Data   []map[string]any `json:"data"`
			}
			if err := json.Unmarshal(got, &decoded); err != nil {
				t.Fatalf("output is not JSON: %v", err)
			}
			for _, item := range decoded.Data {
				for _, f := range tc.forbidden {
					if _, ok := item[f]; ok {
						t.Errorf("data item has %q: %v", f, item)
					}
				}
			}
			if tc.ep != api.EndpointList {
				if got := decoded.Config["data_mode"]; got != "limited" {
					t.Errorf("config data_mode = %v; want limited", got)
				}
			}
		})
	}
}

// TestProjectionNumbersAsWritten projects numbers that a float64 round trip
// would reformat or lose.
func TestProjectionNumbersAsWritten(t *testing.T) {
	plan := testLimitedPlan()
	plan.Fields.Series = []string{"time", "close", "market_cap", "big", "tiny", "exact"}
	p := mustCompile(t, plan)
	numbers := []string{"122980.5", "2452811000000", "1e21", "1E+21", "-0.000001", "12345678901234567890", "1.10"}
	for _, n := range numbers {
		t.Run(n, func(t *testing.T) {
			body := fmt.Sprintf(`{"config":{},"data":[{"time":%s,"close":%s,"spam":%s,"big":%s}]}`, n, n, n, n)
			want := fmt.Sprintf(`{"config":{"data_mode":"limited"},"data":[{"time":%s,"close":%s,"big":%s}]}`, n, n, n)
			got, err := p.Apply(api.EndpointSeries, []byte(body))
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if string(got) != want {
				t.Errorf("Apply = %s; want %s", got, want)
			}
		})
	}
}

func TestProjectionMalformed(t *testing.T) {
	limited := mustCompile(t, testLimitedPlan())
	tests := []struct {
		name string
		ep   api.Endpoint
		body string
	}{
		{"empty body", api.EndpointList, ``},
		{"whitespace only", api.EndpointSeries, " \n"},
		{"top level array", api.EndpointList, `[{"topic":"ai"}]`},
		{"top level string", api.EndpointWhatsup, `"summary"`},
		{"truncated", api.EndpointSeries, `{"config":{},"data":[{"time":1`},
		{"trailing garbage", api.EndpointList, `{"data":[]} x`},
		{"two values", api.EndpointList, `{"data":[]}{}`},
		{"data item not an object", api.EndpointList, `{"data":[{"topic":"a"},"b"]}`},
		{"data item is an array", api.EndpointSeries, `{"config":{},"data":[[{"time":1}]]}`},
		{"data is an object", api.EndpointList, `{"data":{"topic":"ai"}}`},
		{"data is a number", api.EndpointSeries, `{"config":{},"data":1}`},
		{"config not an object", api.EndpointSeries, `{"config":"x","data":[]}`},
		{"config is null", api.EndpointWhatsup, `{"config":null,"summary":"s"}`},
		{"trailing comma in object", api.EndpointList, `{"data":[{"topic":"a",}]}`},
		{"trailing comma in array", api.EndpointList, `{"data":[{"topic":"a"},]}`},
		{"missing colon", api.EndpointList, `{"data" []}`},
		{"unquoted key", api.EndpointList, `{data:[]}`},
		{"single quotes", api.EndpointList, `{'data':[]}`},
		{"bad number in a dropped field", api.EndpointList, `{"data":[{"interactions_24h":01}]}`},
		{"bad number: lone minus", api.EndpointList, `{"data":[{"topic_rank":-}]}`},
		{"bad number: no fraction digits", api.EndpointList, `{"data":[{"topic_rank":1.}]}`},
		{"bad number: no exponent digits", api.EndpointList, `{"data":[{"topic_rank":1e+}]}`},
		{"NaN", api.EndpointList, `{"data":[{"topic_rank":NaN}]}`},
		{"bad literal", api.EndpointWhatsup, `{"summary":nul}`},
		{"bad escape", api.EndpointWhatsup, `{"summary":"\x"}`},
		{"short unicode escape", api.EndpointWhatsup, `{"summary":"\u12"}`},
		{"control character in string", api.EndpointWhatsup, "{\"summary\":\"a\nb\"}"},
		{"unterminated string", api.EndpointWhatsup, `{"summary":"abc}`},
		{"malformed dropped member", api.EndpointWhatsup, `{"summary":"s","critical":[1,,2]}`},
		{"too deep", api.EndpointWhatsup, `{"critical":` + strings.Repeat("[", projMaxDepth+1) + strings.Repeat("]", projMaxDepth+1) + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limited.Apply(tc.ep, []byte(tc.body))
			if err == nil {
				t.Fatalf("Apply(%s, %q) = %s; want an error", tc.ep, tc.body, got)
			}
			if errors.Is(err, ErrLeak) {
				t.Errorf("Apply error = %v; want a malformed-body error, not ErrLeak", err)
			}
			if got != nil {
				t.Errorf("Apply returned %q with its error; want nil", got)
			}
		})
	}
}

func TestProjectionUnknownEndpointFailsClosed(t *testing.T) {
	limited := mustCompile(t, testLimitedPlan())
	got, err := limited.Apply(api.Endpoint(0), []byte(testListBody))
	if !errors.Is(err, ErrLeak) {
		t.Errorf("Apply(unknown endpoint) = %q, %v; want ErrLeak", got, err)
	}
}

// TestProjectionZeroValueAllowsNothing checks the documented zero value:
// limited, with every allowlist empty, including in the verification pass.
func TestProjectionZeroValueAllowsNothing(t *testing.T) {
	var p Projection
	if !p.Limited() || p.AllowsMetric("sentiment") {
		t.Errorf("zero Projection: Limited() = %v, AllowsMetric = %v; want true, false", p.Limited(), p.AllowsMetric("sentiment"))
	}
	got, err := p.Apply(api.EndpointList, []byte(testListBody))
	if want := `{"data":[{},{}]}`; err != nil || string(got) != want {
		t.Errorf("Apply(list) = %s, %v; want %s", got, err, want)
	}
	if err := p.verify(api.EndpointList, []byte(`{"data":[{"topic":"ai"}]}`)); !errors.Is(err, ErrLeak) {
		t.Errorf("verify(list item key) = %v; want ErrLeak", err)
	}
}

// TestProjectionVerifyCatchesProjectorBug injects a projector bug through
// the test hook and checks that Apply withholds the body.
func TestProjectionVerifyCatchesProjectorBug(t *testing.T) {
	tests := []struct {
		name   string
		ep     api.Endpoint
		body   string
		mutate func([]byte) []byte
	}{
		{
			name: "list item gains a field",
			ep:   api.EndpointList,
			body: testListBody,
			mutate: func(b []byte) []byte {
				return bytes.Replace(b, []byte(`"num_posts":`), []byte(`"interactions_24h":1,"num_posts":`), 1)
			},
		},
		{
			name:   "projector returns its input",
			ep:     api.EndpointSeries,
			body:   testSeriesBody,
			mutate: func([]byte) []byte { return []byte(testSeriesBody) },
		},
		{
			name: "whatsup keeps supportive",
			ep:   api.EndpointWhatsup,
			body: testWhatsup,
			mutate: func(b []byte) []byte {
				return append(b[:len(b)-1], `,"supportive":[]}`...)
			},
		},
		{
			name: "config loses data_mode",
			ep:   api.EndpointWhatsup,
			body: testWhatsup,
			mutate: func(b []byte) []byte {
				return bytes.Replace(b, []byte(`,"data_mode":"limited"`), nil, 1)
			},
		},
		{
			name:   "output is cut short",
			ep:     api.EndpointSeries,
			body:   testSeriesBody,
			mutate: func(b []byte) []byte { return b[:len(b)-1] },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, testLimitedPlan())
			if _, err := p.Apply(tc.ep, []byte(tc.body)); err != nil {
				t.Fatalf("Apply without the bug: %v", err)
			}
			p.afterProject = tc.mutate
			got, err := p.Apply(tc.ep, []byte(tc.body))
			if !errors.Is(err, ErrLeak) {
				t.Errorf("Apply with the bug = %s, %v; want ErrLeak", got, err)
			}
			if got != nil {
				t.Errorf("Apply returned %s with ErrLeak; want nil", got)
			}
		})
	}
}

// TestProjectionVerify feeds the verification pass bodies directly: each
// either is a correct limited output or leaks something.
func TestProjectionVerify(t *testing.T) {
	p := mustCompile(t, testLimitedPlan())
	tests := []struct {
		name     string
		ep       api.Endpoint
		out      string
		wantLeak bool
	}{
		{"clean list", api.EndpointList, `{"data":[` + testListItem1Limited + `]}`, false},
		{"clean list, null data", api.EndpointList, `{"data":null}`, false},
		{"clean list, no data", api.EndpointList, `{}`, false},
		{"clean series", api.EndpointSeries, `{"config":` + testSeriesConfigLimited + `,"data":[` + testAssetRowLimited + `]}`, false},
		{"clean series, escaped allowed key", api.EndpointSeries, `{"config":{"data_mode":"limited"},"data":[{"\u0074ime":1}]}`, false},
		{"clean series, nested values", api.EndpointSeries, `{"config":{"m":{"data_mode":"x"},"data_mode":"limited"},"data":[{"time":{"close":[{"spam":1}]}}]}`, false},
		{"clean whatsup", api.EndpointWhatsup, `{"config":{"topic":"ai","data_mode":"limited"},"summary":"s \"q\" {x:1}"}`, false},
		{"list item key", api.EndpointList, `{"data":[` + testListItem1 + `]}`, true},
		{"list item escaped key", api.EndpointList, `{"data":[{"interactions\u005f24h":1}]}`, true},
		{"list top-level key", api.EndpointList, `{"data":[],"total":3}`, true},
		{"list config", api.EndpointList, `{"config":{"data_mode":"limited"},"data":[]}`, true},
		{"list item not an object", api.EndpointList, `{"data":[["interactions_24h"]]}`, true},
		{"list data not an array", api.EndpointList, `{"data":{"interactions_24h":1}}`, true},
		{"list top level not an object", api.EndpointList, `[{"interactions_24h":1}]`, true},
		{"invalid JSON", api.EndpointList, `{"data":[}`, true},
		{"series market field", api.EndpointSeries, `{"config":{"data_mode":"limited"},"data":[{"time":1,"close":2}]}`, true},
		{"series market field in later row", api.EndpointSeries, `{"config":{"data_mode":"limited"},"data":[{"time":1},{"time":2,"market_cap":2}]}`, true},
		{"series top-level key", api.EndpointSeries, `{"config":{"data_mode":"limited"},"data":[],"extra":1}`, true},
		{"series without config", api.EndpointSeries, `{"data":[]}`, true},
		{"series config without data_mode", api.EndpointSeries, `{"config":{},"data":[]}`, true},
		{"series config data_mode full", api.EndpointSeries, `{"config":{"data_mode":"full"},"data":[]}`, true},
		{"series config data_mode twice", api.EndpointSeries, `{"config":{"data_mode":"limited","data_mode":"full"},"data":[]}`, true},
		{"series config data_mode not a string", api.EndpointSeries, `{"config":{"data_mode":true},"data":[]}`, true},
		{"series second config lacks data_mode", api.EndpointSeries, `{"config":{"data_mode":"limited"},"config":{},"data":[]}`, true},
		{"series config not an object", api.EndpointSeries, `{"config":"limited","data":[]}`, true},
		{"whatsup supportive", api.EndpointWhatsup, `{"config":{"data_mode":"limited"},"summary":"s","supportive":[]}`, true},
		{"whatsup data", api.EndpointWhatsup, `{"config":{"data_mode":"limited"},"data":[]}`, true},
		{"unknown endpoint", api.Endpoint(9), `{}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.verify(tc.ep, []byte(tc.out))
			if gotLeak := errors.Is(err, ErrLeak); gotLeak != tc.wantLeak || (err != nil && !gotLeak) {
				t.Errorf("verify(%s, %s) = %v; want leak %v", tc.ep, tc.out, err, tc.wantLeak)
			}
		})
	}
}

func TestProjectionAllowsMetric(t *testing.T) {
	full := mustCompile(t, Plan{DataMode: "full"})
	limited := mustCompile(t, testLimitedPlan())
	none := testLimitedPlan()
	none.Fields.TSV = nil
	noTSV := mustCompile(t, none)
	tests := []struct {
		name   string
		p      *Projection
		metric string
		want   bool
	}{
		{"full allows anything", full, "market_dominance", true},
		{"limited allows a listed metric", limited, "sentiment", true},
		{"limited refuses an unlisted metric", limited, "market_dominance", false},
		{"limited refuses the empty metric", limited, "", false},
		{"names are case-sensitive", limited, "Sentiment", false},
		{"no TSV fields allow nothing", noTSV, "sentiment", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.AllowsMetric(tc.metric); got != tc.want {
				t.Errorf("AllowsMetric(%q) = %v; want %v", tc.metric, got, tc.want)
			}
		})
	}
}

// TestProjectionCompileCopiesFields checks that the compiled projection does
// not share the plan's slices: a later edit of the plan changes nothing.
func TestProjectionCompileCopiesFields(t *testing.T) {
	plan := testLimitedPlan()
	p := mustCompile(t, plan)
	plan.Fields.List[0] = "interactions_24h"
	got, err := p.Apply(api.EndpointList, []byte(testListBody))
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if bytes.Contains(got, []byte("interactions_24h")) || !bytes.Contains(got, []byte(`"topic":"youtube"`)) {
		t.Errorf("Apply after editing the plan = %s; want the allowlist as compiled", got)
	}
}

// TestProjectionConcurrent applies one projection from several goroutines;
// run with -race.
func TestProjectionConcurrent(t *testing.T) {
	p := mustCompile(t, testLimitedPlan())
	body := []byte(testSeriesBody)
	want, err := p.Apply(api.EndpointSeries, body)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				got, err := p.Apply(api.EndpointSeries, body)
				if err != nil || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("Apply = %s, %v; want %s", got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// benchSeriesBody builds a one-week hourly series for an asset: 168 rows of
// all 19 fields (about 60 KB), as the upstream sends by default.
func benchSeriesBody() []byte {
	var b bytes.Buffer
	b.WriteString(`{"config":` + testSeriesConfig + `,"data":[`)
	for i := range 168 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"time":%d,"contributors_active":%d,"contributors_created":%d,"interactions":%d,`+
			`"posts_active":%d,"posts_created":%d,"sentiment":%d,"spam":%d,"alt_rank":%d,`+
			`"circulating_supply":19934512.%d,"close":%d.%02d,"galaxy_score":%d,"high":%d.%02d,"low":%d.%02d,`+
			`"market_cap":%d,"market_dominance":%d.%d,"open":%d.%02d,"social_dominance":%d.%03d,"volume_24h":%d}`,
			1760572800+3600*i, 13600+i*97, 546+i*7, 3000000+i*5953, 25500+i*223, 845+i*9, 70+i%10, 318+i%21,
			190+i%20, i, 105000+i*107, i%100, 56+i%8, 105100+i*107, i%100, 104900+i*107, i%100,
			2100000000000+int64(i)*2083000000, 58+i%7, i%10, 105000+i*107, (i+7)%100, 19+i%11, i*7%1000,
			36000000000+int64(i)*160000000)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// benchListBody builds a topics list of 1,000 items.
func benchListBody() []byte {
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	for i := range 1000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"topic":"topic %d","title":"Topic %d","topic_rank":%d,"topic_rank_1h_previous":%d,`+
			`"topic_rank_24h_previous":%d,"num_contributors":%d,"num_posts":%d,"interactions_24h":%d}`,
			i, i, i+1, i+2, i+5, 385000-i*300, 767000-i*700, 3300000000-int64(i)*3000000)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func TestProjectionBenchBodies(t *testing.T) {
	p := mustCompile(t, testLimitedPlan())
	for name, tc := range map[string]struct {
		ep    api.Endpoint
		body  []byte
		items int
	}{
		"series": {api.EndpointSeries, benchSeriesBody(), 168},
		"list":   {api.EndpointList, benchListBody(), 1000},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := p.Apply(tc.ep, tc.body)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			var decoded struct {
				Data []map[string]json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(got, &decoded); err != nil {
				t.Fatalf("output is not JSON: %v", err)
			}
			if len(decoded.Data) != tc.items {
				t.Errorf("got %d items; want %d", len(decoded.Data), tc.items)
			}
		})
	}
}

func BenchmarkProjectSeries(b *testing.B) {
	p := mustCompile(b, testLimitedPlan())
	body := benchSeriesBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Apply(api.EndpointSeries, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProjectList(b *testing.B) {
	p := mustCompile(b, testLimitedPlan())
	body := benchListBody()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Apply(api.EndpointList, body); err != nil {
			b.Fatal(err)
		}
	}
}
