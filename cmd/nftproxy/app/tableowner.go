package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/kubeproxycleanup"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// tableOwners are the ip/ip6 table names other programs own: nftproxy writing into one of them
// would mix its chains with theirs (iptables-nft then refuses to list a table it cannot parse),
// and `cleanup` would delete the table with everything in it.
var tableOwners = map[string]string{
	"filter":                       "iptables-nft's",
	"nat":                          "iptables-nft's",
	"mangle":                       "iptables-nft's",
	"raw":                          "iptables-nft's",
	"security":                     "iptables-nft's (SELinux)",
	kubeproxycleanup.NFTablesTable: "kube-proxy's (nftables mode)",
}

// checkTableName refuses a --table that is empty or names a table another program owns.
func checkTableName(name string) error {
	if name == "" {
		return fmt.Errorf("--table is empty: name nftproxy's table (default %s)", ruleset.DefaultTable)
	}
	if owner, ok := tableOwners[name]; ok {
		return fmt.Errorf("--table %s: that is %s table; nftproxy must have a table of its own (default %s)", name, owner, ruleset.DefaultTable)
	}
	return nil
}

// ownTableMarker is what tells an existing table is nftproxy's: the all-ports map, which every
// table nftproxy has written holds and no other program's does (kube-proxy's nftables table,
// whose other names nftproxy shares, has none).
const ownTableMarker = ruleset.MapServiceAllPorts

// tableLister reads what checkTableOwned needs from the kernel.
type tableLister interface {
	ListTables(ctx context.Context, f nft.Family) ([]string, error)
	ListSets(ctx context.Context, t nft.Table) ([]nft.Set, error)
}

// checkTableOwned refuses --table when a table of that name exists in the ip or ip6 family and
// nftproxy did not create it, before run writes into it or cleanup deletes it.
func checkTableOwned(ctx context.Context, k tableLister, name string) error {
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		names, err := k.ListTables(ctx, fam)
		if err != nil {
			return fmt.Errorf("list %s tables: %w", fam, err)
		}
		if !slices.Contains(names, name) {
			continue
		}
		t := nft.Table{Family: fam, Name: name}
		sets, err := k.ListSets(ctx, t)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(sets, func(s nft.Set) bool { return s.Name == ownTableMarker }) {
			return fmt.Errorf("--table %s: table %s exists and nftproxy did not create it (it has no map %s, which every nftproxy table holds): it belongs to another program; choose another --table (default %s), or delete that table yourself if you know it is a leftover", name, t, ownTableMarker, ruleset.DefaultTable)
		}
	}
	return nil
}
