// Package gatewaytest builds whole gateways for tests: the demo upstream
// on a loopback server, a gateway in front of it (package gateway) with
// fresh keys on a fake clock, its real servers on random loopback ports,
// and the helpers the tests of package proxy (the request chain) and
// package gateway (the process) share to drive and inspect it: plain and
// HTTPS gateways, HTTP/2 attack set-ups, Redis-backed clusters, upstream
// taps and the oracle's reference answers.
//
// Everything a helper starts stops when its test ends.
package gatewaytest
