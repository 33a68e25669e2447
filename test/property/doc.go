// Package property checks nftproxy against generated Services: a seeded generator makes
// batches of API-valid Services, EndpointSlices and a Node at the API's limits and in odd but
// valid shapes (maximum name lengths, every protocol and family, every traffic policy and
// affinity, ranges of width 1 and ending at 65535, all-ports, many ports and endpoints, node
// ports, Services on the node's own addresses, the Node object's or only the kernel's, and on
// special addresses). The property: each Service is programmed or
// rejected with a documented reason as its shape requires, nothing it says can take the node's
// reserved ports, and the sync never fails as a whole.
//
// The pure test (no root) runs many seeds through the tracker, the builders, the renderer and
// nft.Fake. The render test writes batches as manifest files and runs the real `nftproxy
// render` over them (and, as root, loads its output with nft). The kernel test runs batches
// through the proxier into a lab node's nftables, loads each batch's render text with nft, and
// sends real packets to a canary Service after each one.
//
//	go test ./test/property/                                  # a few seeds (make test)
//	NFTPROXY_SOAK=1 go test -v ./test/property/               # many seeds, larger batches (make soak)
//	NFTPROXY_PROPERTY_SEED=17 go test -v ./test/property/     # rerun one seed (printed on failure)
package property
