package config

import (
	"reflect"
	"strings"
)

// Changed returns the YAML path of every setting whose value differs
// between a and b, in schema order. Sections are compared field by field;
// lists and maps (keys, plans, trusted_proxies, ...) are compared whole
// and reported by their own path. Values are never included, so the
// result is safe to log even for secret settings.
func Changed(a, b *Config) []string {
	var out []string
	diff(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", &out)
	return out
}

func diff(a, b reflect.Value, path string, out *[]string) {
	t := a.Type()
	if t.Kind() != reflect.Struct || t == timeType {
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
		return
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		child := join(path, name)
		if opts == "inline" {
			child = path
		}
		diff(a.Field(i), b.Field(i), child, out)
	}
}
