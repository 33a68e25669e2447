package nft

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
	"golang.org/x/sys/unix"
)

// dumpSocketsTx is a table whose read-back keeps both sockets busy: n elements in each of
// sets sets (no rules name them, so a test may delete one), plus a chain with a rule.
func dumpSocketsTx(tb Table, sets, n int) *Transaction {
	tx := NewTransaction(tb)
	tx.Add(&TableObj{})
	tx.Add(&Chain{Name: "c"})
	tx.Add(&Rule{Chain: "c", Comment: "one rule", Exprs: []Expr{Cmp{Field: FieldL4Proto, Value: Proto(unix.IPPROTO_TCP)}}})
	a := tb.Family.AddrType()
	for s := 0; s < sets; s++ {
		name := fmt.Sprintf("s%d", s)
		tx.Add(&Set{Name: name, Key: []Type{a, TypeInetProto, TypeInetService}, Data: []Type{a, TypeInetService}})
		for i := 0; i < n; i++ {
			tx.Add(&Element{Set: name, Key: []Value{Addr(benchAddr(198, 18, i)), Proto(unix.IPPROTO_TCP), Port(uint16(s))},
				Data: []Value{Addr(benchAddr(198, 19, i)), Port(8080)}})
		}
	}
	return tx
}

// dumpStable is Dump on one socket, taken again until two in a row agree: right after many
// inserts the kernel may still grow a set's hash table, and a dump meanwhile can list an
// element twice (see TestKernelDumpPackedLarge).
func dumpStable(t *testing.T, k *Kernel, tb Table) *Ruleset {
	t.Helper()
	k.dumpSockets = 1
	defer func() { k.dumpSockets = 0 }()
	for i := 0; i < 20; i++ {
		a, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatal(err)
		}
		b, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatal(err)
		}
		if Render(a) == Render(b) {
			return b
		}
		t.Logf("two dumps in a row disagreed; trying again")
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("20 pairs of dumps in a row disagreed")
	return nil
}

// dumpSocketsUsed records which sockets ran a read-back's jobs. Socket 0 waits (up to a
// second) before its second job until socket 1 has taken one, so that both take part however
// the goroutines are scheduled.
func dumpSocketsUsed(k *Kernel) func() []int {
	var mu sync.Mutex
	jobs := map[int]int{}
	started := make(chan struct{})
	var once sync.Once
	k.dumpJobHook = func(ctx context.Context, i, j int) {
		mu.Lock()
		jobs[i]++
		n := jobs[i]
		mu.Unlock()
		if i == 1 {
			once.Do(func() { close(started) })
		} else if n == 2 {
			select {
			case <-started:
			case <-time.After(time.Second):
			}
		}
	}
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return []int{jobs[0], jobs[1]}
	}
}

// TestKernelDumpSockets: a read-back on two sockets (the sets handed to both) equals the
// read-back on one, for Dump and for DumpPacked, and does so again on the same Kernel (the
// second socket is kept). The namespace's fd is closed before the first read-back opens the
// second socket: the Kernel keeps its own.
func TestKernelDumpSockets(t *testing.T) {
	netns.Skip(t)
	ns := netns.New(t, "nftdump-socks")
	fd, err := unix.Dup(ns.Fd())
	if err != nil {
		t.Fatal(err)
	}
	k, err := NewKernel(WithNetNS(fd))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	unix.Close(fd)
	tb := Table{Family: IPv4, Name: "socks"}
	if _, err := k.Apply(context.Background(), dumpSocketsTx(tb, 6, 5000)); err != nil {
		t.Fatal(err)
	}
	want := dumpStable(t, k, tb)
	if n := len(want.Elements); n != 6 {
		t.Fatalf("one socket read %d sets with elements, want 6", n)
	}
	for round := 0; round < 2; round++ {
		used := dumpSocketsUsed(k)
		got, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatalf("round %d: Dump on two sockets: %v", round, err)
		}
		if u := used(); u[0] == 0 || u[1] == 0 {
			t.Errorf("round %d: jobs per socket %v: want both sockets used", round, u)
		}
		if g, w := Render(got), Render(want); g != w {
			t.Errorf("round %d: Dump on two sockets differs from Dump on one:\n%s\nwant\n%s", round, g[:min(len(g), 600)], w[:min(len(w), 600)])
		}
		used = dumpSocketsUsed(k)
		kernelCheckPackedDump(t, k, want)
		if u := used(); u[0] == 0 || u[1] == 0 {
			t.Errorf("round %d: DumpPacked: jobs per socket %v: want both sockets used", round, u)
		}
	}
}

// TestKernelDumpSecondSocketError: an error on the second socket (its set deleted just before
// it dumps it) is what the read-back reports, not the cancellation it causes on the first, and
// the Kernel reads the table back afterwards, on both sockets.
func TestKernelDumpSecondSocketError(t *testing.T) {
	k, ns := kernelTestNS(t, "nftdump-err")
	tb := Table{Family: IPv4, Name: "err"}
	if _, err := k.Apply(context.Background(), dumpSocketsTx(tb, 4, 5000)); err != nil {
		t.Fatal(err)
	}
	other, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	left := 4
	for _, packed := range []bool{false, true} {
		// Socket 1 deletes the set of its first job; socket 0 waits for the cancellation that
		// causes before its second job, so socket 1 takes one whatever the scheduling and
		// socket 0 fails too.
		deleted := ""
		var sets []Set
		if rs, err := k.Dump(context.Background(), tb); err == nil {
			sets = rs.Sets
		}
		jobs0 := 0
		k.dumpJobHook = func(ctx context.Context, i, j int) {
			switch {
			case i == 1 && deleted == "" && j < len(sets):
				deleted = sets[j].Name
				del := NewTransaction(tb)
				del.Delete(&Set{Name: deleted})
				if _, err := other.Apply(context.Background(), del); err != nil {
					t.Errorf("delete set %s: %v", deleted, err)
				}
			case i == 0:
				// Socket 0's second job starts once socket 1's error has cancelled it.
				if jobs0++; jobs0 == 2 {
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		}
		if packed {
			_, err = k.DumpPacked(context.Background(), tb, func(Packed) {})
		} else {
			_, err = k.Dump(context.Background(), tb)
		}
		k.dumpJobHook = nil
		if deleted == "" {
			t.Fatalf("packed %v: the second socket took no set", packed)
		}
		left--
		if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "elements of set "+deleted+":") {
			t.Fatalf("read-back (packed %v) with set %s deleted on the second socket: %v; want its ENOENT", packed, deleted, err)
		}
		rs, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatalf("Dump after the failed one: %v", err)
		}
		if len(rs.Sets) != left || len(rs.Elements) != left {
			t.Fatalf("Dump after the failed one: %d sets, %d with elements; want %d and %d", len(rs.Sets), len(rs.Elements), left, left)
		}
	}
}

// TestKernelDumpCancel: a read-back whose context is cancelled while both sockets dump stops
// both (it returns the cancellation, and leaves no goroutine behind), and the next read-back on
// the same Kernel reads the whole table: the dumps the cancel abandoned are read to their end
// first (else the kernel refuses the next dump on that socket with EBUSY).
func TestKernelDumpCancel(t *testing.T) {
	k, _ := kernelTestNS(t, "nftdump-cancel")
	tb := Table{Family: IPv4, Name: "cancel"}
	if _, err := k.Apply(context.Background(), dumpSocketsTx(tb, 4, 20000)); err != nil {
		t.Fatal(err)
	}
	want := dumpStable(t, k, tb)
	for _, packed := range []bool{true, false} {
		goroutines := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var jobs [2]int
		var mu sync.Mutex
		k.dumpJobHook = func(ctx context.Context, i, j int) {
			mu.Lock()
			jobs[i]++
			both := jobs[0] > 0 && jobs[1] > 0
			mu.Unlock()
			if both && !packed {
				cancel()
			}
		}
		n := 0
		var err error
		if packed {
			_, err = k.DumpPacked(ctx, tb, func(Packed) {
				if n++; n == 3000 {
					cancel()
				}
			})
		} else {
			_, err = k.Dump(ctx, tb)
		}
		cancel()
		k.dumpJobHook = nil
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled read-back (packed %v): %v; want context.Canceled", packed, err)
		}
		// The read-back's goroutines end soon after; slow (a busy machine) is logged, and only
		// goroutines still there a minute later are a leak.
		slow, hang := time.Now().Add(2*time.Second), time.Now().Add(time.Minute)
		for runtime.NumGoroutine() > goroutines {
			if now := time.Now(); now.After(hang) {
				t.Fatalf("cancelled read-back (packed %v): %d goroutines a minute later, %d before: a leak", packed, runtime.NumGoroutine(), goroutines)
			} else if !slow.IsZero() && now.After(slow) {
				t.Logf("cancelled read-back (packed %v): %d goroutines after 2s, %d before; waiting (a busy machine?)", packed, runtime.NumGoroutine(), goroutines)
				slow = time.Time{}
			}
			time.Sleep(10 * time.Millisecond)
		}
		got, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatalf("Dump after a cancelled read-back (packed %v): %v", packed, err)
		}
		if Render(got) != Render(want) {
			t.Errorf("Dump after a cancelled read-back (packed %v) differs from the table", packed)
		}
		kernelCheckPackedDump(t, k, want)
	}
}

// TestKernelStaleDeadlines: a deadline in the past left on a socket (what a cancellation that
// comes just as a read or write returns leaves behind, see nlConn.send) does not fail the next
// request, read-back or Apply on that socket or on the read-back's second one.
func TestKernelStaleDeadlines(t *testing.T) {
	k, _ := kernelTestNS(t, "nftdump-deadline")
	tb := Table{Family: IPv4, Name: "deadline"}
	if _, err := k.Apply(context.Background(), dumpSocketsTx(tb, 4, 100)); err != nil {
		t.Fatal(err)
	}
	want := dumpStable(t, k, tb)
	past := time.Unix(0, 1)
	for name, set := range map[string]func(*nlConn) error{
		"read":  func(c *nlConn) error { return c.s.SetReadDeadline(past) },
		"write": func(c *nlConn) error { return c.s.SetWriteDeadline(past) },
	} {
		for _, c := range k.dumpConns() {
			if err := set(c); err != nil {
				t.Fatal(err)
			}
		}
		got, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatalf("Dump with a stale %s deadline: %v", name, err)
		}
		if Render(got) != Render(want) {
			t.Errorf("Dump with a stale %s deadline differs from the table", name)
		}
		if err := set(k.conn); err != nil {
			t.Fatal(err)
		}
		other := NewTransaction(Table{Family: IPv4, Name: "deadline-" + name})
		other.Add(&TableObj{})
		if _, err := k.Apply(context.Background(), other); err != nil {
			t.Fatalf("Apply with a stale %s deadline: %v", name, err)
		}
	}
}
