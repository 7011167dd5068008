package config

import (
	"bytes"
	"strconv"
	"time"
)

// fastKeys decodes the top-level keys block of data by hand when every
// line of it is in the plain form that trendgate's tools, YAML encoders
// and people write (a block sequence of mappings of one-line scalars):
//
//	keys:
//	  - id: acme-web
//	    sha256: "9f86d0…"
//	    account: acme
//	    expires: 2026-12-01T00:00:00Z
//
// It returns data with the block's lines emptied, for yaml.v3 to decode
// the rest with every line number unchanged, and the keys. ok is false,
// and data is to be decoded whole, when there is no such block or any
// line of it is outside that form (an anchor, a tag, a flow collection, an
// escape, an unknown or repeated field, a value whose reading is not
// obvious): yaml.v3 then decodes it, and reports any mistake with its
// line, as before.
//
// The reason is cost: yaml.v3 builds a node per token before decoding,
// about 12 µs a key, so decoding the keys of a 100,000-key file took over
// a second at every start and SIGHUP; this loop takes a few percent of
// that. FuzzFastKeys holds its answers equal to yaml.v3's.
func fastKeys(data []byte) (rest []byte, keys []Key, ok bool) {
	start, end, ok := keysBlock(data)
	if !ok {
		return data, nil, false
	}
	keys, ok = parseKeys(data[start:end])
	if !ok || !printableASCII(data[start:end]) {
		return data, nil, false
	}
	rest = make([]byte, 0, len(data)-(end-start)+bytes.Count(data[start:end], []byte{'\n'}))
	rest = append(rest, data[:start]...)
	rest = append(rest, bytes.Repeat([]byte{'\n'}, bytes.Count(data[start:end], []byte{'\n'}))...)
	rest = append(rest, data[end:]...)
	return rest, keys, true
}

// printableASCII reports whether b holds only printable ASCII and line
// ends ("\n"): anything else (a tab, a lone "\r", which YAML reads as a
// line end, bytes that are not UTF-8) is yaml.v3's to read or refuse.
func printableASCII(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\n' {
			return false
		}
	}
	return true
}

// keysBlock finds the line "keys:" at column 0 and the lines under it up
// to the next line at column 0 that is not a comment; ok is false for a
// document that is not a plain block mapping (document markers,
// directives, a flow collection at the top, keys named twice).
func keysBlock(data []byte) (start, end int, ok bool) {
	start = -1
	for off := 0; off < len(data); {
		line, next := lineAt(data, off)
		switch {
		case len(line) == 0 || line[0] == ' ' || line[0] == '#':
		case bytes.HasPrefix(line, []byte("---")), bytes.HasPrefix(line, []byte("...")),
			line[0] == '%', line[0] == '{', line[0] == '[', line[0] == '\t', line[0] == '"', line[0] == '\'':
			return 0, 0, false
		case isKeysLine(line):
			if start >= 0 {
				return 0, 0, false
			}
			start = off
		case start >= 0 && end == 0:
			if !topKeyLine(line) {
				return 0, 0, false
			}
			end = off
		}
		off = next
	}
	if start < 0 {
		return 0, 0, false
	}
	if end == 0 {
		end = len(data)
	}
	return start, end, true
}

// topKeyLine reports whether line starts a plain top-level setting
// ("name:" then a space or nothing), which is what may follow the block.
func topKeyLine(line []byte) bool {
	i := 0
	for i < len(line) && (line[i] >= 'a' && line[i] <= 'z' || line[i] == '_') {
		i++
	}
	return i > 0 && i < len(line) && line[i] == ':' && (i+1 == len(line) || line[i+1] == ' ')
}

// isKeysLine reports whether line is "keys:" with nothing but spaces after.
func isKeysLine(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("keys:"))
	return ok && len(bytes.TrimRight(rest, " \r")) == 0
}

// lineAt returns the line starting at off (without its end) and where the
// next one starts.
func lineAt(data []byte, off int) (line []byte, next int) {
	i := bytes.IndexByte(data[off:], '\n')
	if i < 0 {
		return data[off:], len(data)
	}
	return data[off : off+i], off + i + 1
}

// parseKeys reads the block that starts with the "keys:" line.
func parseKeys(block []byte) ([]Key, bool) {
	_, off := lineAt(block, 0)
	dash := -1 // the column of the items' "- "
	var keys []Key
	var seen uint16 // the fields the current item has set
	for off < len(block) {
		line, next := lineAt(block, off)
		off = next
		line = bytes.TrimRight(line, " \r")
		indent := 0
		for indent < len(line) && line[indent] == ' ' {
			indent++
		}
		if indent == len(line) || line[indent] == '#' {
			continue
		}
		body := line[indent:]
		if body[0] == '-' {
			if dash < 0 {
				dash = indent
			}
			if indent != dash || len(body) < 3 || body[1] != ' ' {
				return nil, false
			}
			keys = append(keys, Key{})
			seen = 0
			body = bytes.TrimLeft(body[2:], " ")
			if len(body) != len(line)-dash-2 {
				return nil, false // "-" followed by more than one space
			}
		} else if dash < 0 || indent != dash+2 {
			return nil, false
		}
		bit, ok := setField(&keys[len(keys)-1], body)
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}
	if keys == nil {
		return nil, false // "keys:" alone is null; let yaml.v3 say so
	}
	return keys, true
}

// setField reads one "name: value" line into k and returns the field's
// bit (to find a field set twice).
func setField(k *Key, line []byte) (bit uint16, ok bool) {
	name, raw, found := bytes.Cut(line, []byte(": "))
	if !found {
		name, found = bytes.CutSuffix(line, []byte(":"))
		if !found {
			return 0, false
		}
		raw = nil
	}
	v, isNull, quoted, ok := scalar(raw)
	if !ok {
		return 0, false
	}
	str := func(to *string) bool {
		if !quoted && !isNull && !plainString(v) {
			return false
		}
		*to = v
		return true
	}
	switch string(name) {
	case "id":
		return 1 << 0, str(&k.ID)
	case "sha256":
		return 1 << 1, str(&k.SHA256)
	case "account":
		return 1 << 2, str(&k.Account)
	case "plan":
		return 1 << 3, str(&k.Plan)
	case "expires":
		return 1 << 4, !quoted && timeField(&k.Expires, v, isNull)
	case "not_before":
		return 1 << 5, !quoted && timeField(&k.NotBefore, v, isNull)
	case "created":
		return 1 << 6, !quoted && timeField(&k.Created, v, isNull)
	case "disabled":
		switch {
		case quoted:
			return 0, false
		case isNull, v == "false":
			k.Disabled = false
		case v == "true":
			k.Disabled = true
		default:
			return 0, false
		}
		return 1 << 7, true
	case "per_second":
		return 1 << 8, !quoted && floatField(&k.PerSecond, v, isNull)
	case "burst":
		return 1 << 9, !quoted && intField(&k.Burst, v, isNull)
	case "daily":
		return 1 << 10, !quoted && intField(&k.Daily, v, isNull)
	case "monthly":
		return 1 << 11, !quoted && intField(&k.Monthly, v, isNull)
	}
	return 0, false
}

// scalar reads a one-line value: empty or null (isNull), a double- or
// single-quoted string without escapes, or a plain run of the characters
// ids, digests, numbers and instants are made of; a comment may follow.
func scalar(raw []byte) (v string, isNull, quoted, ok bool) {
	raw = bytes.TrimLeft(raw, " ")
	if len(raw) == 0 {
		return "", true, false, true
	}
	if q := raw[0]; q == '"' || q == '\'' {
		i := bytes.IndexByte(raw[1:], q)
		if i < 0 {
			return "", false, false, false
		}
		s := raw[1 : 1+i]
		if bytes.ContainsAny(s, "\\\"'") || !trailing(raw[2+i:]) {
			return "", false, false, false
		}
		return string(s), false, true, true
	}
	n := 0
	for n < len(raw) && plainByte(raw[n]) {
		n++
	}
	if n == 0 && raw[0] == '~' {
		n = 1
	}
	if n == 0 || !trailing(raw[n:]) {
		return "", false, false, false
	}
	s := string(raw[:n])
	if s == "null" || s == "~" || s == "Null" || s == "NULL" {
		return "", true, false, true
	}
	return s, false, false, true
}

// trailing reports whether what follows a value is nothing, or a comment.
func trailing(b []byte) bool {
	t := bytes.TrimLeft(b, " ")
	return len(t) == 0 || t[0] == '#' && len(t) < len(b)
}

func plainByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '+'
}

// plainString reports whether the plain scalar s is read as the string
// it spells: nothing YAML reads as a boolean, and a letter or '_' first,
// or a digit first with a letter that no number (decimal, 0x, 0o, 0b,
// exponent) holds after it.
func plainString(s string) bool {
	switch s {
	case "true", "false", "True", "False", "TRUE", "FALSE", "yes", "no", "on", "off", "y", "n":
		return false
	}
	letter := false // one that no number has: a digest may start with a digit
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ':' || c == '+':
			return false
		case c == 'e' || c == 'E' || c == 'x' || c == 'o' || c == 'b':
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			letter = true
		}
	}
	c := s[0]
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || '0' <= c && c <= '9' && letter
}

// timeField reads an RFC 3339 instant (which yaml.v3 reads the same way).
func timeField(to **time.Time, v string, isNull bool) bool {
	if isNull {
		*to = nil
		return true
	}
	if len(v) < len("2006-01-02T15:04:05Z") || v[10] != 'T' {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return false
	}
	*to = &t
	return true
}

// decimal reports whether v is an optional '-' and digits, without a
// leading zero (which YAML may read otherwise).
func decimal(v string) bool {
	d := v
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 1 && d[0] == '0' {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

func intField[T int | int64](to **T, v string, isNull bool) bool {
	if isNull {
		*to = nil
		return true
	}
	if !decimal(v) {
		return false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || int64(T(n)) != n {
		return false
	}
	x := T(n)
	*to = &x
	return true
}

func floatField(to **float64, v string, isNull bool) bool {
	if isNull {
		*to = nil
		return true
	}
	whole, frac, _ := stringsCut(v, '.')
	if !decimal(whole) || len(frac) > 0 && !decimal("1"+frac) {
		return false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return false
	}
	*to = &f
	return true
}

// stringsCut is strings.Cut on a byte.
func stringsCut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
