// Package kubeproxycleanup knows what upstream kube-proxy leaves in the kernel and plans its removal
// over netlink, for the migration from kube-proxy to nftproxy (`nftproxy cleanup --kube-proxy`):
// its nftables-mode tables, and in iptables mode (iptables-nft, which writes nftables tables)
// the chains it creates (by exact name: IsKubeProxyChain) and the rules of other chains that
// jump to them. Nothing else is touched: not the iptables tables themselves, not their base
// chains, not kubelet's own KUBE-* chains, not another component's KUBE-* chains.
//
// Rules kube-proxy wrote through iptables-legacy live in x_tables, not nftables, and are out of
// reach of netlink's nftables API; see deploy/MIGRATION.md.
package kubeproxycleanup

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
)

// NFTablesTable is the name of kube-proxy's table in nftables mode, in the ip and ip6 families
// (k/k pkg/proxy/nftables: kubeProxyTable; it never used inet).
const NFTablesTable = "kube-proxy"

// IPTablesTables are the iptables-nft tables kube-proxy's iptables mode writes chains into.
var IPTablesTables = []string{"filter", "nat", "mangle"}

// KubeletChains are KUBE-* chains kubelet creates and keeps (kube-proxy writes a copy of
// KUBE-FIREWALL, the guard against martian packets to 127.0.0.0/8, and never deletes it
// either): removing them would take kubelet's protection away, so they stay. None of them is
// in FixedChains; the list says so to whoever reads the names.
var KubeletChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}

// FixedChains are the chains kube-proxy's iptables and IPVS modes create under fixed names
// (k/k pkg/proxy/iptables and pkg/proxy/ipvs, proxier.go, v1.34), and those older releases
// created (KUBE-MARK-DROP). Other components write KUBE-* chains into the same iptables-nft
// tables (kube-router's network policies: KUBE-ROUTER-INPUT, KUBE-NWPLCY-…, KUBE-POD-FW-…;
// kubelet's KubeletChains), so kube-proxy's are known by exact name, never by prefix.
var FixedChains = []string{
	// iptables mode
	"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING",
	"KUBE-MARK-MASQ", "KUBE-FORWARD", "KUBE-PROXY-FIREWALL", "KUBE-PROXY-CANARY",
	// older releases (kubelet and kube-proxy both wrote it until kubelet stopped)
	"KUBE-MARK-DROP",
	// IPVS mode
	"KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-SOURCE-RANGES-FIREWALL",
	"KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER",
}

// ServiceChainPrefixes start the names of the chains kube-proxy's iptables mode generates per
// Service port (SVC, SVL, EXT, FW) and per endpoint (SEP); KUBE-XLB- is SVL's name before
// v1.24. Each is followed by exactly ServiceChainHashLen characters of base32 (the first
// characters of base32(sha256(...)), k/k portProtoHash and servicePortEndpointChainName).
var ServiceChainPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-"}

// ServiceChainHashLen is the length of the hash in a generated chain's name.
const ServiceChainHashLen = 16

// IsKubeProxyChain reports whether an iptables chain name is one kube-proxy creates: one of
// FixedChains, or one of ServiceChainPrefixes followed by exactly a 16-character base32 hash.
func IsKubeProxyChain(name string) bool {
	if slices.Contains(FixedChains, name) {
		return true
	}
	for _, p := range ServiceChainPrefixes {
		if h, ok := strings.CutPrefix(name, p); ok {
			return isBase32Hash(h)
		}
	}
	return false
}

// isBase32Hash reports whether h is ServiceChainHashLen characters of the standard base32
// alphabet (A-Z, 2-7; no padding can occur that early in the encoding of a sha256 sum).
func isBase32Hash(h string) bool {
	if len(h) != ServiceChainHashLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Kernel is what planning reads: the tables of a family and a table's contents.
type Kernel interface {
	ListTables(ctx context.Context, f nft.Family) ([]string, error)
	Dump(ctx context.Context, t nft.Table) (*nft.Ruleset, error)
}

// Plan is the removal: one transaction, and what it removes for the log.
type Plan struct {
	// Tx deletes, in this order, the rules of other chains that jump or go to a kube-proxy
	// chain, then flushes every kube-proxy chain (they jump to each other), deletes them, and
	// deletes kube-proxy's nftables tables. Applied as one batch: all of it or nothing.
	Tx *nft.Transaction
	// Tables are the nftables-mode tables deleted.
	Tables []nft.Table
	// Chains counts kube-proxy's chains deleted, per iptables table ("ip nat").
	Chains map[string]int
	// JumpRules counts the rules of other chains deleted because they lead to a kube-proxy chain.
	JumpRules int
}

// Empty reports whether there is nothing of kube-proxy's to remove.
func (p *Plan) Empty() bool { return p.Tx.Len() == 0 }

// PlanCleanup reads the ip and ip6 families and plans the removal of everything of kube-proxy's.
func PlanCleanup(ctx context.Context, k Kernel) (*Plan, error) {
	p := &Plan{Tx: nft.NewTransaction(nft.Table{}), Chains: map[string]int{}}
	var jumps, flushes, chains []nft.Op
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		names, err := k.ListTables(ctx, fam)
		if err != nil {
			return nil, fmt.Errorf("list %s tables: %w", fam, err)
		}
		for _, name := range names {
			t := nft.Table{Family: fam, Name: name}
			if name == NFTablesTable {
				p.Tables = append(p.Tables, t)
				continue
			}
			if !slices.Contains(IPTablesTables, name) {
				continue
			}
			rs, err := k.Dump(ctx, t)
			if err != nil {
				return nil, fmt.Errorf("read iptables-nft table %s: %w", t, err)
			}
			j, f, c := planTable(rs)
			jumps, flushes, chains = append(jumps, j...), append(flushes, f...), append(chains, c...)
			if len(c) > 0 {
				p.Chains[t.String()] = len(c)
			}
		}
	}
	p.JumpRules = len(jumps)
	p.Tx.Ops = append(append(append(p.Tx.Ops, jumps...), flushes...), chains...)
	for _, t := range p.Tables {
		p.Tx.Ops = append(p.Tx.Ops, nft.Op{Verb: nft.VerbDelete, Table: t, Object: &nft.TableObj{}})
	}
	return p, nil
}

// planTable returns the ops for one iptables-nft table: deletions of the rules of other chains
// that lead to a kube-proxy chain, flushes and deletions of the kube-proxy chains.
func planTable(rs *nft.Ruleset) (jumps, flushes, chains []nft.Op) {
	ours := map[string]bool{}
	for _, c := range rs.Chains {
		if c.Base == nil && IsKubeProxyChain(c.Name) {
			ours[c.Name] = true
			flushes = append(flushes, nft.Op{Verb: nft.VerbFlush, Table: rs.Table, Object: &nft.Chain{Name: c.Name}})
			chains = append(chains, nft.Op{Verb: nft.VerbDelete, Table: rs.Table, Object: &nft.Chain{Name: c.Name}})
		}
	}
	for _, r := range rs.Rules {
		if ours[r.Chain] || !leadsTo(r, ours) {
			continue
		}
		jumps = append(jumps, nft.Op{Verb: nft.VerbDelete, Table: rs.Table, Object: &nft.Rule{Chain: r.Chain, Handle: r.Handle}})
	}
	return jumps, flushes, chains
}

// leadsTo reports whether rule r jumps or goes to one of chains.
func leadsTo(r nft.Rule, chains map[string]bool) bool {
	for _, e := range r.Exprs {
		if v, ok := e.(nft.Verdict); ok && (v.Kind == nft.VerdictJump || v.Kind == nft.VerdictGoto) && chains[v.Chain] {
			return true
		}
	}
	return false
}
