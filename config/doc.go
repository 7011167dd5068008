// Package config decodes and validates trendgate's YAML configuration.
package config
