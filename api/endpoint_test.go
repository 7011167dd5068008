package api

import "testing"

func TestEndpointNames(t *testing.T) {
	want := []string{"list", "whatsup", "series", "tsv"}
	names := EndpointNames()
	if len(names) != len(want) {
		t.Fatalf("EndpointNames() = %q; want %q", names, want)
	}
	for i, e := range Endpoints {
		if names[i] != want[i] || e.String() != want[i] || !e.Valid() {
			t.Errorf("endpoint %d: name %q, String %q, Valid %v; want %q", i, names[i], e.String(), e.Valid(), want[i])
		}
		if got, ok := EndpointNamed(want[i]); !ok || got != e {
			t.Errorf("EndpointNamed(%q) = %v, %v; want %v", want[i], got, ok, e)
		}
	}
	for _, e := range []Endpoint{0, Endpoint(len(Endpoints) + 2), 255} {
		if e.Valid() || e.String() != "unknown" {
			t.Errorf("Endpoint(%d): Valid %v, String %q; want false, unknown", e, e.Valid(), e.String())
		}
	}
	for _, name := range []string{"", "List", "unknown", "time-series"} {
		if _, ok := EndpointNamed(name); ok {
			t.Errorf("EndpointNamed(%q) found an endpoint", name)
		}
	}
}
