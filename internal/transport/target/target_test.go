package target

import (
	"net/url"
	"reflect"
	"testing"
)

// check compares Parse with url.ParseRequestURI on t.
func check(t *testing.T, s string) {
	t.Helper()
	want, wantErr := url.ParseRequestURI(s)
	sentinel := url.URL{Fragment: "untouched"}
	got := sentinel
	err := Parse(&got, s)
	switch {
	case (err != nil) != (wantErr != nil):
		t.Fatalf("Parse(%q): error %v; url.ParseRequestURI: %v", s, err, wantErr)
	case err != nil:
		if got != sentinel {
			t.Fatalf("Parse(%q) failed but changed the URL: %#v", s, got)
		}
	case !reflect.DeepEqual(got, *want):
		t.Fatalf("Parse(%q) = %#v; url.ParseRequestURI = %#v", s, got, *want)
	}
}

func TestParseAgreesWithParseRequestURI(t *testing.T) {
	for _, s := range []string{
		"/", "/api4/public/topics/list/v1", "/api4/public/topic/bitcoin/time-series/v1?bucket=hour&interval=1d",
		"/a?", "/a??", "/a?b?", "/?", "//evil.example/x", "///x", "/a:b/c", "/a;b=c,d@e$f&g+h~i",
		"/a%2Fb", "/a%zz", "/a b", "/a#b", "/a#b?c", "/a!b", "/a'b(c)*", "/a[b]", "*", "", "a/b", "http://x/y",
		"/a\x7f", "/a\x00", "/?\x04", "/a?b\x7f", "/caf\xc3\xa9", "/topic/%23ai/time-series/posts.tsv",
	} {
		check(t, s)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"/", "/a?b=c", "/a?", "//x", "/a%41", "/a b", "*", "/a#b?"} {
		f.Add(s)
	}
	f.Fuzz(check)
}

func BenchmarkParse(b *testing.B) {
	const s = "/api4/public/topic/bitcoin/time-series/v1?bucket=hour&interval=1d"
	b.Run("target", func(b *testing.B) {
		var u url.URL
		for b.Loop() {
			if err := Parse(&u, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseRequestURI", func(b *testing.B) {
		for b.Loop() {
			if _, err := url.ParseRequestURI(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
