package config

import (
	"strings"
	"unicode"
)

// stateWords are the words of a path that say a call changes something
// upstream. A route whose path has one is served through GET like any
// other, but caching it would answer a repeated call without making it.
var stateWords = map[string]bool{
	"add": true, "append": true, "archive": true, "cancel": true, "clear": true,
	"create": true, "delete": true, "destroy": true, "disable": true,
	"edit": true, "enable": true, "follow": true, "insert": true,
	"modify": true, "move": true, "patch": true, "purge": true,
	"remove": true, "rename": true, "reset": true, "revoke": true,
	"save": true, "send": true, "set": true, "subscribe": true, "unfollow": true,
	"unsubscribe": true, "update": true, "upsert": true, "vote": true, "write": true,
}

// stateChangeWord returns the first word of path that names a change of
// state ("delete" in /api4/public/searches/{slug}/delete, in
// .../deleteSearch or in .../search-delete), or "". Literal segments are
// split into words at every character that is not a letter and where a
// lower-case letter meets an upper-case one; parameters are skipped.
func stateChangeWord(path string) string {
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") {
			continue
		}
		for _, w := range words(seg) {
			if stateWords[strings.ToLower(w)] {
				return strings.ToLower(w)
			}
		}
	}
	return ""
}

// words splits s at non-letters and at lower-to-upper case changes.
func words(s string) []string {
	var out []string
	start := -1
	var prev rune
	for i, r := range s {
		switch {
		case !unicode.IsLetter(r):
			if start >= 0 {
				out = append(out, s[start:i])
			}
			start = -1
		case start < 0:
			start = i
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			out = append(out, s[start:i])
			start = i
		}
		prev = r
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}
