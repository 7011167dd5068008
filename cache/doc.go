// Package cache is trendgate's response cache.
package cache
