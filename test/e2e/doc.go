// Package e2e is the packet-level end-to-end tier of nftproxy (DESIGN §7, tier 3): the built
// daemon runs in a lab node (see test/lab), reads Service, EndpointSlice and Node manifests from
// a directory the test writes, and real TCP and UDP packets from outside clients, pods and the
// node prove each Service feature: which backend answered, on which port, and which source
// address it saw. The tests need root and skip otherwise; README.md lists the scenarios.
package e2e
