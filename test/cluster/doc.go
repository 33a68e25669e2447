// Package cluster is the integration tier's control plane (DESIGN §7 tier 4): a real etcd and a
// real kube-apiserver started on 127.0.0.1 for one test, with an admin identity, ServiceAccount
// identities bound to a ClusterRole, and a relay that lets a process inside a test network
// namespace reach the API server.
//
// The binaries are built from the Go module proxy by two helper modules under tools/ (one pins a
// Kubernetes release, one an etcd release) and cached outside the repository in a directory keyed
// by their versions and module files, so only the first run pays for the build (README.md).
//
// The tier is skipped under NFTPROXY_UNIT_ONLY, NFTPROXY_SKIP_CLUSTER and `go test -short`.
package cluster
