package app

import (
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// families are the IP families the builders program: the ip_family series of the kube-proxy
// metrics.
func families(builders []*ruleset.Builder) []nft.Family {
	var out []nft.Family
	for _, b := range builders {
		out = append(out, b.Family())
	}
	return out
}
