// Package gateway is the trendgate process around the request chain
// (package proxy). It builds the chain's dependencies from the
// configuration (upstream client, cache, limiter; on Redis in cluster
// mode), opens the listeners and runs the public server with its HTTP/1.1
// and HTTP/2 lanes, the plain-HTTP listener and the admin listener, wires
// TLS certificates, reloads the configuration, loads and saves the cache
// snapshot and the state file (quota counters and usage kept across
// restarts: state.go), serves the admin listener with the operator's
// console (package console) and the key API's service (package
// keyservice), and drains on shutdown.
//
// Serve is a start and a drain (server.go); everything a request meets
// between them is the chain's.
package gateway
