package demo

import (
	"testing"
)

func TestSpikeRangeMatchesSpikeFactor(t *testing.T) {
	c, err := newCatalog(mix(1), 300)
	if err != nil {
		t.Fatal(err)
	}
	from := int64(1760000400) - 1760000400%3600
	spikesSeen := 0
	for _, tp := range c.list[:40] {
		got := tp.spikeRange(from, 24*60, nil)
		for i, f := range got {
			want := tp.spikeFactor(from + int64(i)*hour)
			if f != want {
				t.Fatalf("%s hour %d: spikeRange %v; spikeFactor %v", tp.topic, i, f, want)
			}
			if f > 5 {
				spikesSeen++
			}
		}
	}
	if spikesSeen == 0 {
		t.Errorf("no spike above 5x in 40 topics x 60 days; want some")
	}
}

func TestAlign(t *testing.T) {
	tests := []struct{ x, b, up, down int64 }{
		{0, 3600, 0, 0},
		{1, 3600, 3600, 0},
		{3600, 3600, 3600, 3600},
		{7199, 3600, 7200, 3600},
		{-1, 3600, 0, -3600},
		{1760000000, 86400, 1760054400, 1759968000},
	}
	for _, tc := range tests {
		if got := alignUp(tc.x, tc.b); got != tc.up {
			t.Errorf("alignUp(%d, %d): got %d; want %d", tc.x, tc.b, got, tc.up)
		}
		if got := alignDown(tc.x, tc.b); got != tc.down {
			t.Errorf("alignDown(%d, %d): got %d; want %d", tc.x, tc.b, got, tc.down)
		}
	}
}

func TestRoundSig(t *testing.T) {
	tests := []struct {
		v    float64
		sig  int
		want float64
	}{
		{122980.54, 7, 122980.5},
		{0.2312345678, 4, 0.2312},
		{58.07123, 4, 58.07},
		{2452811000123.7, 13, 2452811000124},
		{0, 5, 0},
		{-1.23456, 3, -1.23},
		{0.000123456, 3, 0.000123},
		{9.99951, 4, 10},
		{1, 3, 1},
		{10, 3, 10},
		{0.1, 2, 0.1},
		{123.456, 2, 123},
	}
	for _, tc := range tests {
		if got := roundSig(tc.v, tc.sig); got != tc.want {
			t.Errorf("roundSig(%v, %d): got %v; want %v", tc.v, tc.sig, got, tc.want)
		}
	}
}
