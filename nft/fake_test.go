package nft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/golden"
)

// fakeApply builds one transaction on table ip nftproxy and applies it.
func fakeApply(t *testing.T, f *Fake, ops ...confBuild) error {
	t.Helper()
	tx := NewTransaction(confTables[0])
	c := &confCtx{t: t, k: f}
	for _, b := range ops {
		b(tx, c)
	}
	_, err := f.Apply(context.Background(), tx)
	return err
}

func fakeMust(t *testing.T, f *Fake, ops ...confBuild) {
	t.Helper()
	if err := fakeApply(t, f, ops...); err != nil {
		t.Fatalf("Apply: got %v, want success", err)
	}
}

func TestFakeDumpAndListTables(t *testing.T) {
	f := NewFake()
	ctx := context.Background()
	if _, err := f.Dump(ctx, confTables[0]); !IsNotFound(err) {
		t.Fatalf("Dump of a missing table: got %v, want an IsNotFound error", err)
	}
	fakeMust(t, f, add(&TableObj{}), on(Table{Family: IPv4, Name: "other"}), add(&TableObj{}), on(confTables[1]), add(&TableObj{}))
	for fam, want := range map[Family][]string{IPv4: {"nftproxy", "other"}, IPv6: {"nftproxy"}} {
		got, err := f.ListTables(ctx, fam)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ListTables(%s): got %v, %v; want %v", fam, got, err, want)
		}
	}
}

func TestFakeCountsAndContext(t *testing.T) {
	f := NewFake()
	fakeMust(t, f, add(&TableObj{}), add(ch("a")))
	if err := fakeApply(t, f, add(rule("nosuch", "", accept))); err == nil {
		t.Fatal("rule in a missing chain: got success, want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tx := NewTransaction(confTables[0])
	tx.Add(ch("b"))
	if _, err := f.Apply(ctx, tx); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context: got %v, want context.Canceled", err)
	}
	if f.Applied != 1 || f.Refused != 1 {
		t.Errorf("counters: got Applied=%d Refused=%d, want 1 and 1", f.Applied, f.Refused)
	}
	if got := confState(t, f); got != "table ip nftproxy {\n\tchain a {\n\t}\n}\n" {
		t.Errorf("state after a cancelled Apply: got\n%s", got)
	}
}

func TestFakeOpError(t *testing.T) {
	f := NewFake()
	err := fakeApply(t, f, add(&TableObj{}), add(ch("a")), add(rule("a", "to x", jump("svc-x/ns/a/tcp/p"))))
	var op *OpError
	if !errors.As(err, &op) {
		t.Fatalf("got %v (%T), want *OpError", err, err)
	}
	if op.Index != 2 || op.Op != "add rule" || !errors.Is(op, syscall.ENOENT) ||
		!strings.HasPrefix(op.Object, "rule ip nftproxy a ") || !strings.Contains(op.Detail, "svc-x/ns/a/tcp/p") {
		t.Errorf("got %#v, want index 2, op \"add rule\", ENOENT, object naming rule and chain, detail naming the missing chain", op)
	}
}

// TestFakeCopiesInput checks that a caller reusing its objects after Apply does not change what
// the fake holds.
func TestFakeCopiesInput(t *testing.T) {
	f := NewFake()
	fields := []Field{FieldSaddr}
	r := rule("a", "", CmpSet{Fields: fields, Set: "s"})
	s := &Set{Name: "s", Key: []Type{TypeIPv4Addr}}
	fakeMust(t, f, add(&TableObj{}), add(ch("a")), add(s), add(r))
	before := confState(t, f)
	fields[0] = FieldDaddr
	s.Key[0] = TypeIPv6Addr
	r.Comment = "changed"
	if after := confState(t, f); after != before {
		t.Errorf("state changed with the caller's objects:\n%s", golden.Diff(before, after))
	}
}

// TestFakeStricterThanKernel covers what the fake refuses although the kernel, which sees only
// byte lengths, might not: types that differ but have the same size.
func TestFakeStricterThanKernel(t *testing.T) {
	setup := []confBuild{add(&TableObj{}), add(ch("a")), add(&Set{Name: "marks", Key: []Type{TypeMark}}),
		add(&Set{Name: "ep", Key: []Type{TypeInteger}, Data: []Type{TypeIPv4Addr, TypeInetService}, NumgenKey: 2})}
	tests := []struct {
		name  string
		op    confBuild
		errno syscall.Errno
	}{
		{"lookup field type", add(rule("a", "", CmpSet{Fields: []Field{FieldDaddr}, Set: "marks"})), syscall.EINVAL},
		{"element key type", add(elem("marks", v("198.18.0.1"))), syscall.EINVAL},
		{"compare value type", add(rule("a", "", Cmp{Field: FieldMark, Value: Int(1)})), syscall.EINVAL},
		{"numgen map without port", add(rule("a", "", DNATNumgen{Modulus: 2, Map: "ep"})), syscall.EINVAL},
		{"numgen modulus 0", add(rule("a", "", DNATNumgen{Map: "ep", WithPort: true})), syscall.ERANGE},
		{"vmap on a plain set", add(rule("a", "", VMap{Fields: []Field{FieldMark}, Map: "marks"})), syscall.EINVAL},
		{"port out of range", add(rule("a", "", Cmp{Field: FieldDport, Value: Value{Type: TypeInetService, Num: 70000}})), syscall.EINVAL},
		{"prefix of the other family", add(rule("a", "", CmpPrefix{Field: FieldSaddr, Prefix: confPrefix("fd00::/8")})), syscall.EINVAL},
		{"interval end before start", add(&Element{Set: "r", Key: key(Port(9)), KeyEnd: key(Port(1))}), syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			fakeMust(t, f, append(setup, add(&Set{Name: "r", Key: []Type{TypeInetService}, Interval: true}))...)
			err := fakeApply(t, f, tt.op)
			if !errors.Is(err, tt.errno) {
				t.Errorf("got %v, want errno %v", err, tt.errno)
			}
		})
	}
}

// TestFakePipapoEnclosure pins a kernel quirk: a concatenated interval that encloses an existing
// one, with neither end inside it, is accepted; the other order is refused.
func TestFakePipapoEnclosure(t *testing.T) {
	span := func(lo, hi uint16) *Element {
		return &Element{Set: "m", Key: key(v("198.19.0.1"), Port(lo)), KeyEnd: key(v("198.19.0.1"), Port(hi))}
	}
	set := &Set{Name: "m", Key: []Type{TypeIPv4Addr, TypeInetService}, Interval: true}
	tests := []struct {
		name        string
		first, then *Element
		want        error
	}{
		{"wide after narrow", span(150, 160), span(100, 200), nil},
		{"narrow after wide", span(100, 200), span(150, 160), syscall.EEXIST},
		{"start inside", span(100, 200), span(200, 300), syscall.EEXIST},
		{"touching", span(100, 200), span(201, 300), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			fakeMust(t, f, add(&TableObj{}), add(set), add(tt.first))
			err := fakeApply(t, f, add(tt.then))
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestFakeSetAddAgain pins what Linux 6.18 does when a set is added again with the same types:
// the default timeout is replaced, the comment is kept.
func TestFakeSetAddAgain(t *testing.T) {
	f := NewFake()
	fakeMust(t, f, add(&TableObj{}), add(&Set{Name: "aff", Key: []Type{TypeIPv4Addr}, Timeout: 3 * time.Hour, Comment: "one"}))
	fakeMust(t, f, add(&Set{Name: "aff", Key: []Type{TypeIPv4Addr}, Timeout: 2 * time.Hour, Comment: "two"}))
	rs, err := f.Dump(context.Background(), confTables[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.Sets[0]; got.Timeout != 2*time.Hour || got.Comment != "one" {
		t.Errorf("set after a second add: got timeout %v comment %q, want 2h and \"one\"", got.Timeout, got.Comment)
	}
}

// BenchmarkFakeServiceMap measures one full sync of n services into the fake: a chain and a
// dispatch-map element each, in one transaction.
func BenchmarkFakeServiceMap(b *testing.B) {
	const n = 10000
	tx := NewTransaction(confTables[0])
	tx.Add(&TableObj{})
	tx.Add(base("pre", ChainTypeNAT, HookPrerouting, -100))
	tx.Add(confSetIPs("service-ips", IPv4))
	tx.Add(rule("pre", "", VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-ips"}))
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		tx.Add(ch(name))
		tx.Add(rule(name, "", DNAT{Addr: ip("198.18.1.1")}))
		a := v(fmt.Sprintf("198.19.%d.%d", i/256, i%256))
		tx.Add(&Element{Set: "service-ips", Key: key(a, Proto(udp), Port(16384)), KeyEnd: key(a, Proto(udp), Port(32767)), Verdict: &Verdict{Kind: VerdictGoto, Chain: name}})
	}
	b.ResetTimer()
	for range b.N {
		if _, err := NewFake().Apply(context.Background(), tx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFakeNumgenKeyedMap checks the Fake's rules for a DNATNumgen with a packet-field key: the
// map's key must be those fields' types then integer, and only the two supported keys are taken.
func TestFakeNumgenKeyedMap(t *testing.T) {
	addrKey := []Type{TypeIPv4Addr, TypeInetProto, TypeInetService, TypeInteger}
	data := []Type{TypeIPv4Addr, TypeInetService}
	setup := []confBuild{add(&TableObj{}), add(ch("a")),
		add(&Set{Name: "endpoints", Key: addrKey, Data: data, NumgenKey: 1}),
		add(&Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: data, NumgenKey: 1}),
		add(&Set{Name: "ep", Key: []Type{TypeInteger}, Data: data, NumgenKey: 2})}
	tests := []struct {
		name  string
		op    confBuild
		errno syscall.Errno // 0: accepted
	}{
		{"address key", add(rule("a", "", DNATNumgen{Modulus: 3, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr})), 0},
		{"node-port key", add(rule("a", "", DNATNumgen{Modulus: 3, Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyPort})), 0},
		{"element", add(&Element{Set: "endpoints", Key: key(v("198.18.0.1"), Proto(6), Port(80), Int(0)), Data: key(v("198.18.1.1"), Port(8080))}), 0},
		{"element without slot", add(&Element{Set: "endpoints", Key: key(v("198.18.0.1"), Proto(6), Port(80)), Data: key(v("198.18.1.1"), Port(8080))}), syscall.EINVAL},
		{"address key on the node-port map", add(rule("a", "", DNATNumgen{Modulus: 3, Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyAddr})), syscall.EINVAL},
		{"key on an integer map", add(rule("a", "", DNATNumgen{Modulus: 2, Map: "ep", WithPort: true, Key: DNATNumgenKeyPort})), syscall.EINVAL},
		{"no key on a keyed map", add(rule("a", "", DNATNumgen{Modulus: 2, Map: "endpoints", WithPort: true})), syscall.EINVAL},
		{"unsupported key", add(rule("a", "", DNATNumgen{Modulus: 2, Map: "nodeport-endpoints", WithPort: true, Key: []Field{FieldL4Proto, FieldSport}})), syscall.EINVAL},
		{"modulus 0", add(rule("a", "", DNATNumgen{Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr})), syscall.ERANGE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFake()
			fakeMust(t, f, setup...)
			err := fakeApply(t, f, tt.op)
			if tt.errno == 0 && err != nil || tt.errno != 0 && !errors.Is(err, tt.errno) {
				t.Errorf("got %v, want errno %v", err, tt.errno)
			}
		})
	}
}

// TestFakeCopiesNumgenKey checks that the Fake keeps its own copy of a DNATNumgen's Key.
func TestFakeCopiesNumgenKey(t *testing.T) {
	f := NewFake()
	k := []Field{FieldL4Proto, FieldDport}
	fakeMust(t, f, add(&TableObj{}), add(ch("a")),
		add(&Set{Name: "m", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{TypeIPv4Addr}, NumgenKey: 1}),
		add(rule("a", "", DNATNumgen{Modulus: 1, Map: "m", Key: k})))
	before := confState(t, f)
	k[0] = FieldSaddr
	if after := confState(t, f); after != before {
		t.Errorf("state changed with the caller's Key:\n%s", golden.Diff(before, after))
	}
}
