package config

// nameRule says what validName accepts, for validation problems.
const nameRule = `must match ^[A-Za-z0-9_.-]{1,64}$ and not be "." or ".."`

// nameHelp says it in words, for the key API and the command line.
const nameHelp = `use 1 to 64 letters, digits, '_', '.' or '-', other than "." and ".."`

// validName reports whether id can name a key, an account, a plan or an
// admin token: 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'. They appear in
// logs, metric labels and admin URL paths, so "." and "..", which a URL
// path resolves away, are refused as well. It is a loop, not a regexp:
// a reload of 100,000 keys checks every id.
func validName(id string) bool {
	if len(id) == 0 || len(id) > 64 || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// validDigest reports whether s is a SHA-256 digest in 64 lower-case hex
// digits.
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
