package upstream

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"trendgate/api"
	"trendgate/internal/clock"
)

// seriesRows returns a realistic hourly series body with n rows.
func seriesRows(n int) string {
	var b strings.Builder
	b.WriteString(`{"config":{"topic":"bitcoin","id":"bitcoin","interval":"1w","bucket":"hour","metrics":[],"generated":1760647718},"data":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"time":%d,"contributors_active":29804,"contributors_created":1702,"interactions":3811420,"posts_active":60233,"posts_created":2291,"sentiment":77,"spam":351}`, 1759968000+3600*i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func BenchmarkCheckBodySeries(b *testing.B) {
	body := []byte(seriesRows(180))
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := checkBody(api.EndpointSeries, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDoSeries(b *testing.B) {
	body := seriesRows(180)
	stub := newStub(b, respond(200, body))
	c, err := New(testConfig(stub.srv.URL), clock.Real{}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Do(context.Background(), seriesReq); err != nil {
			b.Fatal(err)
		}
	}
}
