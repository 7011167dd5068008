package config

import "time"

// Equal reports whether k and o are the same key with the same settings.
// It is what a reload compares 100,000 keys with, so it is plain field
// comparisons rather than reflection.
func (k Key) Equal(o Key) bool {
	return k.ID == o.ID && k.SHA256 == o.SHA256 && k.Account == o.Account && k.Plan == o.Plan &&
		k.Disabled == o.Disabled && sameTime(k.Expires, o.Expires) && sameTime(k.NotBefore, o.NotBefore) &&
		sameTime(k.Created, o.Created) && same(k.PerSecond, o.PerSecond) && same(k.Burst, o.Burst) &&
		same(k.Daily, o.Daily) && same(k.Monthly, o.Monthly)
}

// Equal reports whether a and o are the same account with the same
// settings.
func (a Account) Equal(o Account) bool {
	return a.ID == o.ID && a.Plan == o.Plan && same(a.PerSecond, o.PerSecond) && same(a.Burst, o.Burst) &&
		same(a.Daily, o.Daily) && same(a.Monthly, o.Monthly)
}

// same reports whether two optional numbers are both unset or both set to
// the same value.
func same[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// sameTime is same for instants, compared as instants.
func sameTime(a, b *time.Time) bool {
	return a == b || a != nil && b != nil && a.Equal(*b)
}
