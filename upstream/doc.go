// Package upstream is trendgate's client for the analytics upstream.
package upstream
