// Package soak holds nftproxy's fault-tolerance scenarios: the real daemon in a lab of network
// namespaces (test/lab) is killed, restarted and upgraded under traffic, has its tables edited
// behind its back, is fed thousands of endpoint changes and hostile manifests, and meets a
// kernel that refuses its transactions. Each scenario reports figures (connections attempted
// and failed, repair times, sync latency, memory) and fails only on a goal: a failed
// connection, a lost element, a panic, a final state different from the desired one.
//
// `go test ./test/soak/` runs the short version (part of `make test`). NFTPROXY_SOAK=1 runs the
// long one and prints a table of every scenario's figures:
//
//	NFTPROXY_SOAK=1 go test -v -count=1 -timeout 60m ./test/soak/
//
// Needs root; skips otherwise and under NFTPROXY_UNIT_ONLY.
package soak
