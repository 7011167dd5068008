// Package limits holds per-key rate limits and quotas.
package limits
