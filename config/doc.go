// Package config decodes and validates trendgate's YAML configuration.
//
// It owns the file's schema, ${VAR} expansion, defaults and the reporting
// of every problem with its YAML path; what a setting means belongs to the
// package it configures (each domain package validates its own Config).
// Config never opens a connection, a listener or a certificate: a Config
// is data, checked and handed to gateway.New.
package config
