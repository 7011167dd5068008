package api

import "testing"

func TestAccountOf(t *testing.T) {
	tests := []struct {
		name, keyID, account, want string
	}{
		{"a key without an account is its own account", "k1", "", "k1"},
		{"a key with an account draws on it", "k1", "acme", "acme"},
		{"an account named like another key is still the account", "k1", "k2", "k2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := AccountOf(tc.keyID, tc.account); got != tc.want {
				t.Errorf("AccountOf(%q, %q) = %q; want %q", tc.keyID, tc.account, got, tc.want)
			}
		})
	}
}
