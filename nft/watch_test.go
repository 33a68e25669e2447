package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/test/netns"
)

var (
	watchIP  = Table{Family: IPv4, Name: "nftproxy"}
	watchIP6 = Table{Family: IPv6, Name: "nftproxy"}
)

// withWatchBuffer sets the event socket's receive buffer in bytes (NewWatcher; default
// DefaultWatchBuffer): a small one provokes an overflow.
func withWatchBuffer(n int) KernelOption {
	return func(c *kernelConfig) { c.watchBuffer = n }
}

// watchMsg builds one event as the kernel sends it: header with the committing port, nfgenmsg
// with the family, attributes.
func watchMsg(typ uint16, fam Family, pid uint32, attrs func(w *nlBuf)) nlMsg {
	var w nlBuf
	off := w.beginMsg(codecMsgTypeNFT|typ, 0, 1, uint8(fam), 0)
	if attrs != nil {
		attrs(&w)
	}
	w.endMsg(off)
	return nlMsg{typ: codecMsgTypeNFT | typ, pid: pid, data: w.b[nlMsgHdrLen:]}
}

func watchTableMsg(typ uint16, t Table, pid uint32) nlMsg {
	return watchMsg(typ, t.Family, pid, func(w *nlBuf) { w.str(1, t.Name) })
}

func watchGenMsg(gen, pid uint32, proc string) nlMsg {
	return watchMsg(unix.NFT_MSG_NEWGEN, Family(unix.AF_UNSPEC), pid, func(w *nlBuf) {
		w.u32(unix.NFTA_GEN_ID, gen)
		w.u32(unix.NFTA_GEN_PROC_PID, 4242)
		w.str(unix.NFTA_GEN_PROC_NAME, proc)
	})
}

// TestWatchStateBatches is the decoder on its own: which batches are reported.
func TestWatchStateBatches(t *testing.T) {
	const own, other = 7, 9
	other4 := Table{Family: Family(unix.NFPROTO_INET), Name: "filter"}
	cases := []struct {
		name  string
		msgs  []nlMsg
		wantN int // Foreigns reported
		want  []Table
	}{
		{"our own commit", []nlMsg{watchTableMsg(unix.NFT_MSG_NEWCHAIN, watchIP, own), watchTableMsg(unix.NFT_MSG_NEWSETELEM, watchIP6, own), watchGenMsg(5, own, "nftproxy")}, 0, nil},
		{"another table", []nlMsg{watchTableMsg(unix.NFT_MSG_NEWRULE, other4, other), watchGenMsg(5, other, "nft")}, 0, nil},
		{"same name, other family", []nlMsg{watchTableMsg(unix.NFT_MSG_DELTABLE, Table{Family: Family(unix.NFPROTO_INET), Name: "nftproxy"}, other), watchGenMsg(5, other, "nft")}, 0, nil},
		{"flush ruleset", []nlMsg{watchTableMsg(unix.NFT_MSG_DELTABLE, other4, other), watchTableMsg(unix.NFT_MSG_DELTABLE, watchIP6, other), watchTableMsg(unix.NFT_MSG_DELTABLE, watchIP, other), watchGenMsg(6, other, "nft")}, 1, []Table{watchIP, watchIP6}},
		{"one element", []nlMsg{watchTableMsg(unix.NFT_MSG_DELSETELEM, watchIP, other), watchGenMsg(6, other, "nft")}, 1, []Table{watchIP}},
		{"destroy", []nlMsg{watchTableMsg(nftMsgDestroyTable, watchIP, other), watchGenMsg(6, other, "nft")}, 1, []Table{watchIP}},
		{"own, then foreign", []nlMsg{watchTableMsg(unix.NFT_MSG_NEWRULE, watchIP, own), watchGenMsg(5, own, "nftproxy"), watchTableMsg(unix.NFT_MSG_NEWRULE, watchIP, other), watchGenMsg(6, other, "nft")}, 1, []Table{watchIP}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := watchState{tables: map[Table]bool{watchIP: true, watchIP6: true}, own: own, hasOwn: true}
			var got []Foreign
			for _, m := range c.msgs {
				if f, ok := s.feed(m); ok {
					got = append(got, f)
				}
			}
			if len(got) != c.wantN {
				t.Fatalf("reported %d batches (%+v), want %d", len(got), got, c.wantN)
			}
			if c.wantN == 1 && (fmt.Sprint(got[0].Tables) != fmt.Sprint(c.want) || got[0].Process != "nft" || got[0].PID != 4242 || got[0].Gen != 6) {
				t.Errorf("got %+v, want tables %v from nft (pid 4242) at generation 6", got[0], c.want)
			}
		})
	}
}

// watchHarness is a namespace with our Kernel, a Watcher on our two tables and the Foreigns it
// reports.
type watchHarness struct {
	t   *testing.T
	ctx context.Context
	k   *Kernel
	ns  *netns.NS
	got chan Foreign
}

func newWatchHarness(t *testing.T, opts ...KernelOption) *watchHarness {
	t.Helper()
	k, ns := kernelTestNS(t, "nftk-watch")
	w, err := NewWatcher([]Table{watchIP, watchIP6}, k, append([]KernelOption{WithNetNS(ns.Fd())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &watchHarness{t: t, ctx: ctx, k: k, ns: ns, got: make(chan Foreign, 100)}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(f Foreign) { h.got <- f }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watcher.Run: %v", err)
		}
		w.Close()
	})
	return h
}

func (h *watchHarness) nft(script string) uint32 {
	h.t.Helper()
	if out, err := h.ns.RunStdin(script, "nft", "-f", "-"); err != nil {
		h.t.Fatalf("nft -f: %v\n%s\nscript:\n%s", err, out, script)
	}
	return h.gen()
}

func (h *watchHarness) gen() uint32 {
	h.t.Helper()
	g, err := h.k.Generation(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return g
}

// next is the next Foreign reported (the bound only stops a broken test).
func (h *watchHarness) next(what string) Foreign {
	h.t.Helper()
	select {
	case f := <-h.got:
		return f
	case <-time.After(10 * time.Second):
		h.t.Fatalf("%s: no change reported", what)
		return Foreign{}
	}
}

// sentinel makes a foreign change to our table and checks that it is the next one reported:
// whatever came before it and was not reported never will be (events arrive in commit order).
func (h *watchHarness) sentinel(after string) {
	h.t.Helper()
	g := h.nft("add chain ip nftproxy sentinel\ndelete chain ip nftproxy sentinel\n")
	if f := h.next(after); f.Gen != g || f.Overflow {
		h.t.Fatalf("after %s: first report is %+v, want the sentinel's batch (generation %d): %s triggered a verification", after, f, g, after)
	}
}

// TestKernelWatch: our own commits and other tables' changes are not reported; every foreign
// change to our tables is, as one Foreign per batch naming the committing process.
func TestKernelWatch(t *testing.T) {
	h := newWatchHarness(t)
	ctx := context.Background()
	for _, fam := range []Family{IPv4, IPv6} {
		tx := kernelBaseTx(fam)
		a := "198.18.0.1"
		if fam == IPv6 {
			a = "fd00::1"
		}
		tx.Add(&Element{Set: "service-hash", Key: []Value{Addr(netip.MustParseAddr(a)), Proto(unix.IPPROTO_TCP), Port(80)}, Verdict: &Verdict{Kind: VerdictGoto, Chain: "svc-a"}})
		if _, err := h.k.Apply(ctx, tx); err != nil {
			t.Fatal(err)
		}
	}
	h.sentinel("our own commits")

	// Another writer's table, and a second Kernel (another netlink port) writing to it.
	h.nft("table inet filter {\n chain input { type filter hook input priority 0; policy accept; }\n}\nadd rule inet filter input tcp dport 22 accept\n")
	other, err := NewKernel(WithNetNS(h.ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otx := NewTransaction(Table{Family: IPv4, Name: "other"})
	otx.Add(&TableObj{})
	otx.Add(&Chain{Name: "c"})
	if _, err := other.Apply(ctx, otx); err != nil {
		t.Fatal(err)
	}
	h.sentinel("changes to other tables")

	foreign := []struct {
		name   string
		script string
		want   []Table
	}{
		{"delete one of our chains", "delete element ip nftproxy service-hash { 198.18.0.1 . tcp . 80 }\ndelete chain ip nftproxy svc-a\n", []Table{watchIP}},
		{"delete one element", "delete element ip6 nftproxy service-hash { fd00::1 . tcp . 80 }\n", []Table{watchIP6}},
		{"add a stray rule", "add rule ip nftproxy prerouting tcp dport 22 drop\n", []Table{watchIP}},
		{"nft flush ruleset", "flush ruleset\n", []Table{watchIP, watchIP6}},
	}
	for _, c := range foreign {
		g := h.nft(c.script)
		f := h.next(c.name)
		if f.Gen != g || fmt.Sprint(f.Tables) != fmt.Sprint(c.want) || f.Process != "nft" || f.Overflow {
			t.Errorf("%s: reported %+v, want tables %v changed by nft at generation %d", c.name, f, c.want, g)
		}
	}

	// A second Kernel is foreign too: commits are told apart by netlink port, not by process.
	tx := NewTransaction(watchIP)
	tx.Add(&TableObj{})
	if _, err := other.Apply(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if f := h.next("another Kernel in this process"); fmt.Sprint(f.Tables) != fmt.Sprint([]Table{watchIP}) {
		t.Errorf("another Kernel's commit: reported %+v, want table %v", f, watchIP)
	}
}

// TestKernelWatchOverflow: events lost to a full socket buffer are reported, so the caller
// verifies everything instead of trusting a partial stream. The batch is committed before the
// Watcher reads, so its events cannot be drained as they come.
func TestKernelWatchOverflow(t *testing.T) {
	k, ns := kernelTestNS(t, "nftk-watch")
	w, err := NewWatcher([]Table{watchIP}, k, WithNetNS(ns.Fd()), withWatchBuffer(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	other, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Apply(context.Background(), kernelScaleTx(watchIP, 200, 2000, false)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []Foreign
	err = w.Run(ctx, func(f Foreign) {
		got = append(got, f)
		cancel()
	})
	if err != nil || len(got) != 1 || !got[0].Overflow {
		t.Fatalf("a 2,200-object batch into a 4 KiB buffer: reported %+v (err %v), want one overflow", got, err)
	}
}

// TestWatchNLMsgPID checks the header field the Watcher relies on.
func TestWatchNLMsgPID(t *testing.T) {
	var w nlBuf
	off := w.beginMsg(codecMsgTypeNFT|unix.NFT_MSG_NEWGEN, 0, 3, 0, 0)
	w.endMsg(off)
	binary.NativeEndian.PutUint32(w.b[12:16], 99)
	msgs, err := nlParseMsgs(nil, w.b)
	if err != nil || len(msgs) != 1 || msgs[0].pid != 99 {
		t.Fatalf("parsed %+v, %v; want one message from port 99", msgs, err)
	}
}

// TestKernelWatchUnwatchedBatches: our own large batches are applied with the Watcher out of the
// event group, so the kernel sends it none of their events (a small batch's still come and are
// dropped), and a batch another process commits meanwhile, which the Watcher cannot see, is
// reported as Unwatched all the same, through the generation.
func TestKernelWatchUnwatchedBatches(t *testing.T) {
	h := newWatchHarness(t)
	ctx := context.Background()
	w := h.k.watcher
	if w == nil {
		t.Fatal("NewWatcher(own) did not attach the Watcher to its Kernel")
	}
	small := kernelBaseTx(IPv4)
	if len(small.Ops) >= unwatchedOps {
		t.Fatalf("the small batch has %d ops", len(small.Ops))
	}
	if _, err := h.k.Apply(ctx, small); err != nil {
		t.Fatal(err)
	}
	h.sentinel("a small batch of ours")
	seen := w.state.ownEvents.Load()
	if seen == 0 {
		t.Fatal("no event of our small batch was read: the count below proves nothing")
	}

	big := kernelScaleTx(watchIP6, 50, 3*unwatchedOps, false)
	if _, err := h.k.Apply(ctx, big); err != nil {
		t.Fatal(err)
	}
	h.sentinel("a large batch of ours")
	if got := w.state.ownEvents.Load() - seen; got != 0 {
		t.Errorf("read %d events of our large batch (%d ops), want none: it was applied watched", got, len(big.Ops))
	}

	// Another process commits while the Watcher is out of the group: its events never reach us.
	other, err := NewKernel(WithNetNS(h.ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	h.k.unwatchedHook = func() {
		tx := NewTransaction(watchIP)
		tx.Add(&Chain{Name: "stray"})
		if _, err := other.Apply(ctx, tx); err != nil {
			t.Error(err)
		}
	}
	if _, err := h.k.Apply(ctx, big); err != nil { // again: adding what exists is no error
		t.Fatal(err)
	}
	h.k.unwatchedHook = nil
	if f := h.next("a foreign batch while ours was applied unwatched"); !f.Unwatched {
		t.Errorf("reported %+v, want Unwatched", f)
	}
	h.sentinel("the unwatched report")

	// A refused large batch commits nothing: no report.
	bad := kernelScaleTx(watchIP6, 1, unwatchedOps, false)
	bad.Delete(&Chain{Name: "no-such-chain"})
	if _, err := h.k.Apply(ctx, bad); err == nil {
		t.Fatal("a batch deleting a missing chain was accepted")
	}
	h.sentinel("a refused large batch of ours")
}
