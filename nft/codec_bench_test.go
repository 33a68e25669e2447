package nft

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
	"golang.org/x/sys/unix"
)

// The benchmarks of this file measure our own Go time (and garbage) on the two paths that scale
// with the cluster: encoding a full sync into one batch, and reading a programmed table back.
// Their shape is the shared-map layout at nSvc Services with nEp endpoints each: a ClusterIP
// set, a Service verdict map with one commented element per Service, the endpoint map keyed
// address . protocol . port . slot, and the pick-N chains with their rules, in the order the
// reconciler sends a full sync (chains, sets, rules, then elements grouped by set). Figures go in
// README.md ("Go time of Apply and Dump"), never into assertions.

const (
	benchServices  = 10000
	benchEndpoints = 10
)

// benchFullSyncTx is a full sync of nSvc Services × nEp endpoints on the shared-map layout. With
// nodePorts every Service also has a node port (the node-ports interval map, the
// nodeport-endpoints map and pick-nodeport-N chains) and every distinct endpoint address a
// hairpin pair: the element count of a restart on the layout.
func benchFullSyncTx(nSvc, nEp int, nodePorts bool) *Transaction {
	fam := IPv4
	a := fam.AddrType()
	tx := NewTransaction(Table{Family: fam, Name: "nftproxy"})
	tx.Add(&TableObj{})
	base := []struct {
		name string
		typ  ChainType
		hook Hook
		prio int32
	}{
		{"nat-prerouting", ChainTypeNAT, HookPrerouting, -100},
		{"nat-output", ChainTypeNAT, HookOutput, -100},
		{"nat-postrouting", ChainTypeNAT, HookPostrouting, 100},
		{"filter-input", ChainTypeFilter, HookInput, -110},
		{"filter-forward", ChainTypeFilter, HookForward, -110},
	}
	for _, c := range base {
		tx.Add(&Chain{Name: c.name, Base: &BaseChain{Type: c.typ, Hook: c.hook, Priority: c.prio}})
	}
	for _, c := range []string{"services", "masquerading", "reject"} {
		tx.Add(&Chain{Name: c})
	}
	for n := 1; n <= nEp; n++ {
		tx.Add(&Chain{Name: fmt.Sprintf("pick-%d", n)})
		tx.Add(&Chain{Name: fmt.Sprintf("masq-pick-%d", n)})
	}
	tx.Add(&Set{Name: "cluster-ips", Key: []Type{a}, Comment: "ClusterIPs of programmed Services"})
	tx.Add(&Set{Name: "service-ips", Key: []Type{a, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict},
		Comment: "ClusterIP, LoadBalancer IP or external IP . protocol . port -> Service"})
	tx.Add(&Set{Name: "endpoints", Key: []Type{a, TypeInetProto, TypeInetService, TypeInteger},
		Data: []Type{a, TypeInetService}, NumgenKey: 1, Comment: "address . protocol . port . slot -> endpoint"})
	if nodePorts {
		for n := 1; n <= nEp; n++ {
			tx.Add(&Chain{Name: fmt.Sprintf("pick-nodeport-%d", n)})
		}
		tx.Add(&Set{Name: "hairpin", Key: []Type{a, a}, Comment: "endpoint . endpoint"})
		tx.Add(&Set{Name: "node-ports", Key: []Type{TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: true,
			Comment: "protocol . node port -> Service"})
		tx.Add(&Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger},
			Data: []Type{a, TypeInetService}, NumgenKey: 1, Comment: "protocol . node port . slot -> endpoint"})
	}
	rules := []Rule{
		{Chain: "nat-prerouting", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "services"}}},
		{Chain: "nat-output", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "services"}}},
		{Chain: "nat-postrouting", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "masquerading"}}},
		{Chain: "masquerading", Exprs: []Expr{MarkTest{Mask: 0x4000, NonZero: true}, MarkXor{Bits: 0x4000}, Masquerade{FullyRandom: true}}, Comment: "masquerade marked traffic"},
		{Chain: "services", Exprs: []Expr{VMap{Fields: DNATNumgenKeyAddr, Map: "service-ips"}}},
		{Chain: "services", Exprs: []Expr{CmpSet{Fields: []Field{FieldDaddr}, Set: "cluster-ips"}, Verdict{Kind: VerdictGoto, Chain: "reject"}}},
		{Chain: "reject", Exprs: []Expr{Reject{}}},
		{Chain: "filter-input", Exprs: []Expr{CtState{Mask: CtStateNew}, MarkTest{Mask: 0x8000, NonZero: true}, Verdict{Kind: VerdictDrop}}, Comment: "drop what nftproxy marked to drop"},
	}
	for n := 1; n <= nEp; n++ {
		rules = append(rules,
			Rule{Chain: fmt.Sprintf("pick-%d", n), Exprs: []Expr{DNATNumgen{Modulus: uint32(n), Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}}},
			Rule{Chain: fmt.Sprintf("masq-pick-%d", n), Exprs: []Expr{MarkOr{Bits: 0x4000}, Verdict{Kind: VerdictGoto, Chain: fmt.Sprintf("pick-%d", n)}}})
	}
	if nodePorts {
		rules = append(rules, Rule{Chain: "services", Exprs: []Expr{VMap{Fields: DNATNumgenKeyPort, Map: "node-ports"}}})
		for n := 1; n <= nEp; n++ {
			rules = append(rules, Rule{Chain: fmt.Sprintf("pick-nodeport-%d", n),
				Exprs: []Expr{DNATNumgen{Modulus: uint32(n), Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyPort}}})
		}
	}
	for i := range rules {
		tx.Add(&rules[i])
	}
	// Elements grouped by set, sets by name, each in key order: the order the reconciler emits.
	pick := fmt.Sprintf("pick-%d", nEp)
	for s := 0; s < nSvc; s++ {
		tx.Add(&Element{Set: "cluster-ips", Key: []Value{Addr(benchAddr(198, 18, s))}})
	}
	for s := 0; s < nSvc; s++ {
		for e := 0; e < nEp; e++ {
			tx.Add(&Element{Set: "endpoints",
				Key:  []Value{Addr(benchAddr(198, 18, s)), Proto(unix.IPPROTO_TCP), Port(80), Int(uint32(e))},
				Data: []Value{Addr(benchAddr(198, 19, (s*nEp+e)%(1<<16))), Port(8080)}})
		}
	}
	if nodePorts {
		for i := 0; i < min(nSvc*nEp, 1<<16); i++ {
			ep := Addr(benchAddr(198, 19, i))
			tx.Add(&Element{Set: "hairpin", Key: []Value{ep, ep}})
		}
		for s := 0; s < nSvc; s++ {
			tx.Add(&Element{Set: "node-ports", Key: []Value{Proto(unix.IPPROTO_TCP), Port(uint16(30000 + s))},
				Verdict: &Verdict{Kind: VerdictGoto, Chain: fmt.Sprintf("pick-nodeport-%d", nEp)}, Comment: fmt.Sprintf("ns-%05d/svc-%05d:http", s/100, s)})
		}
		for s := 0; s < nSvc; s++ {
			for e := 0; e < nEp; e++ {
				tx.Add(&Element{Set: "nodeport-endpoints",
					Key:  []Value{Proto(unix.IPPROTO_TCP), Port(uint16(30000 + s)), Int(uint32(e))},
					Data: []Value{Addr(benchAddr(198, 19, (s*nEp+e)%(1<<16))), Port(8080)}})
			}
		}
	}
	for s := 0; s < nSvc; s++ {
		tx.Add(&Element{Set: "service-ips", Key: []Value{Addr(benchAddr(198, 18, s)), Proto(unix.IPPROTO_TCP), Port(80)},
			Verdict: &Verdict{Kind: VerdictGoto, Chain: pick}, Comment: fmt.Sprintf("ns-%05d/svc-%05d:http", s/100, s)})
	}
	return tx
}

// benchAddr is the i-th address of a.b.0.0/16 (i < 65536): Services in 198.18.0.0/16, endpoints
// in 198.19.0.0/16 (endpoint addresses repeat beyond 65536 endpoints; only keys must differ).
func benchAddr(a, b byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{a, b, byte(i >> 8), byte(i)})
}

// benchCPU reports the process's user and system CPU per op between two rusage samples: Go's
// own work (and its garbage collector, on other threads) against the kernel's.
func benchCPU(b *testing.B, before unix.Rusage, n int) {
	var after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &after); err != nil || n == 0 {
		return
	}
	us := func(t unix.Timeval) float64 { return float64(t.Sec)*1e6 + float64(t.Usec) }
	b.ReportMetric((us(after.Utime)-us(before.Utime))/1e3/float64(n), "user-ms/op")
	b.ReportMetric((us(after.Stime)-us(before.Stime))/1e3/float64(n), "sys-ms/op")
}

// BenchmarkEncodeFullSync encodes a 10k-Service full sync into one batch without sending it:
// the Go side of Apply alone. All sets are added by the transaction, so no read-back happens.
func BenchmarkEncodeFullSync(b *testing.B) {
	tx := benchFullSyncTx(benchServices, benchEndpoints, false)
	k := &Kernel{conn: &nlConn{}, sets: map[Table]map[string]Set{}}
	ctx := context.Background()
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	b.ReportAllocs()
	n, size := 0, 0
	for b.Loop() {
		bt, err := k.encode(ctx, tx)
		if err != nil {
			b.Fatal(err)
		}
		n, size = n+1, len(bt.w.b)
	}
	b.ReportMetric(float64(size), "batch-bytes")
	b.ReportMetric(float64(len(tx.Ops)), "ops")
	benchCPU(b, ru, n)
}

// BenchmarkDumpFullSync reads back a table programmed with the same full sync, from a real
// kernel in a private namespace (root only): the kernel's dump and our decoding together, split
// into user and system CPU. 10k Services hold 120k elements; "restart" adds node ports and
// hairpin pairs (295,536 elements in six sets, the shape a restart at 10k × 10 reads back);
// 30k Services put 300k of their 360k elements in one map.
func BenchmarkDumpFullSync(b *testing.B) {
	for _, c := range []struct {
		name      string
		nSvc      int
		nodePorts bool
	}{
		{"services=10000", benchServices, false},
		{"services=10000,restart", benchServices, true},
		{"services=30000", 3 * benchServices, false},
	} {
		b.Run(c.name, func(b *testing.B) { benchDump(b, c.nSvc, c.nodePorts) })
	}
}

func benchDump(b *testing.B, nSvc int, nodePorts bool) {
	ns := netns.New(b, "nftb-dump")
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		b.Fatalf("NewKernel: %v", err)
	}
	defer k.Close()
	ctx := context.Background()
	tx := benchFullSyncTx(nSvc, benchEndpoints, nodePorts)
	want := 0
	for _, op := range tx.Ops {
		if _, ok := op.Object.(*Element); ok {
			want++
		}
	}
	start := time.Now()
	if _, err := k.Apply(ctx, tx); err != nil {
		b.Fatalf("Apply: %v", err)
	}
	b.Logf("programmed %d ops in %v", len(tx.Ops), time.Since(start))
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	b.ReportAllocs()
	n, elems := 0, 0
	for b.Loop() {
		rs, err := k.Dump(ctx, tx.Table)
		if err != nil {
			b.Fatal(err)
		}
		n, elems = n+1, 0
		for _, els := range rs.Elements {
			elems += len(els)
		}
	}
	if elems != want {
		b.Fatalf("Dump returned %d elements, want %d", elems, want)
	}
	b.ReportMetric(float64(elems), "elements")
	benchCPU(b, ru, n)
}

// BenchmarkDumpRules reads back 3,000 own chains of 3 rules each (the numgen cascade of
// OWN-CHAINS mode Services, whose rules carry comments) from a kernel in a private namespace
// (root only): the cost of rule decoding, which the shared maps leave to few Services.
func BenchmarkDumpRules(b *testing.B) {
	ns := netns.New(b, "nftb-rules")
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		b.Fatalf("NewKernel: %v", err)
	}
	defer k.Close()
	ctx := context.Background()
	tx := NewTransaction(Table{Family: IPv4, Name: "nftproxy"})
	tx.Add(&TableObj{})
	for i := 0; i < 3000; i++ {
		c := fmt.Sprintf("svc-%05d", i)
		tx.Add(&Chain{Name: c})
		for j := 3; j > 0; j-- {
			tx.Add(&Rule{Chain: c, Comment: fmt.Sprintf("ns/svc-%05d:http", i), Exprs: []Expr{
				NumgenMatch{Modulus: uint32(j), Value: 0},
				Cmp{Field: FieldL4Proto, Value: Proto(unix.IPPROTO_TCP)},
				DNAT{Addr: benchAddr(198, 19, i*3+j), Port: 8080}}})
		}
	}
	if _, err := k.Apply(ctx, tx); err != nil {
		b.Fatalf("Apply: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rs, err := k.Dump(ctx, tx.Table)
		if err != nil {
			b.Fatal(err)
		}
		if len(rs.Rules) != 9000 {
			b.Fatalf("Dump returned %d rules, want 9000", len(rs.Rules))
		}
	}
}
