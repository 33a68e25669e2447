package nft

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel is the real nftables, programmed over one lasting NETLINK_NETFILTER socket (a second
// one reads tables back beside it: decode_dump.go). Every Apply is one nfnetlink batch sent in
// one sendmsg, so the kernel commits all of it or none of it.
//
// A Kernel is not safe for concurrent use: one reconciler goroutine owns it (sequence numbers and
// the socket's replies belong to one request at a time).
type Kernel struct {
	conn *nlConn
	// dumpConn is a second socket, opened by the first read-back of a table, on which that
	// read-back's sets are dumped beside those on conn (see dumpContents). netnsFD is the
	// namespace it is opened in: the Kernel's own copy (dup) of WithNetNS's fd (0: the caller's
	// namespace).
	dumpConn *nlConn
	netnsFD  int
	// dumpSockets is how many sockets a read-back uses (0: dumpSocketsDefault); tests set it.
	dumpSockets int
	// dumpJobHook, when set (tests), runs on a read-back's socket i before it dumps job j
	// (the elements of the table's j-th set, or the rules for j == len(sets)), with the
	// context that job runs in.
	dumpJobHook func(ctx context.Context, i, j int)
	// sets caches the definitions of the sets each table holds, so encoding an element op on a
	// set the transaction does not add needs no read-back: reading every set of a large table
	// would cost a partial sync more than the rest of its work. Learned from Dump and from applied transactions; a
	// name it lacks is read from the kernel again; dropped for a table whose transaction failed.
	sets map[Table]map[string]Set
	// setReads counts set read-backs, for tests.
	setReads int
	// watcher is the Watcher that ignores this Kernel's commits (NewWatcher's own), if any: a
	// large batch is applied with it out of the event group (applyUnwatched).
	watcher *Watcher
	// unwatchedHook, when set (tests), runs while the watcher is out of the event group.
	unwatchedHook func()
}

var _ Interface = (*Kernel)(nil)

// KernelOption configures NewKernel.
type KernelOption func(*kernelConfig)

type kernelConfig struct {
	netnsFD     int
	watchBuffer int // NewWatcher only
}

// WithNetNS programs the network namespace open at fd (e.g. /proc/<pid>/ns/net) instead of the
// caller's own; tests use it to work in a private namespace.
func WithNetNS(fd int) KernelOption {
	return func(c *kernelConfig) { c.netnsFD = fd }
}

// NewKernel opens the netlink connection. It needs CAP_NET_ADMIN in the target namespace.
func NewKernel(opts ...KernelOption) (*Kernel, error) {
	var cfg kernelConfig
	for _, o := range opts {
		o(&cfg)
	}
	c, err := nlDial(cfg.netnsFD)
	if err != nil {
		return nil, err
	}
	k := &Kernel{conn: c, sets: map[Table]map[string]Set{}}
	if cfg.netnsFD > 0 {
		// Kept for the read-back's second socket, which is opened later: the caller may
		// close its fd once NewKernel returns.
		if k.netnsFD, err = unix.FcntlInt(uintptr(cfg.netnsFD), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			c.close()
			return nil, fmt.Errorf("keep network namespace fd %d: %w", cfg.netnsFD, err)
		}
	}
	return k, nil
}

// Close releases the sockets.
func (k *Kernel) Close() error {
	err := k.conn.close()
	if k.dumpConn != nil {
		k.dumpConn.close()
		k.dumpConn = nil
	}
	if k.netnsFD > 0 {
		unix.Close(k.netnsFD)
		k.netnsFD = 0
	}
	return err
}

// Apply sends tx as one batch (see README.md, "ACKs and errors"): only BATCH_END asks for an
// acknowledgement, the kernel reports every refused message by its sequence number, and the
// replies are read once the kernel has processed the whole batch (it does so inside sendmsg).
// A refused op comes back as *OpError naming it.
func (k *Kernel) Apply(ctx context.Context, tx *Transaction) (Stats, error) {
	st := Stats{Ops: tx.Len()}
	for i, op := range tx.All() {
		t := kernelOpTable(tx, op)
		if t.Name == "" || (t.Family != IPv4 && t.Family != IPv6) {
			return st, fmt.Errorf("apply transaction (%d ops): op %d on table %q: needs a table name and family IPv4 or IPv6", st.Ops, i, t)
		}
	}
	if st.Ops == 0 {
		return st, nil
	}
	if w := k.watcher; w != nil && st.Ops >= unwatchedOps {
		return k.applyUnwatched(ctx, tx, w)
	}
	return k.apply(ctx, tx)
}

// unwatchedOps is the size from which a batch is applied with the Watcher out of the event
// group. The kernel builds an event for every object a batch changes as soon as anyone listens,
// and ours are only read to be dropped: at 10k Services the events multiply the kernel's time for
// a full sync (figures: README.md, "Events: drift detection"; measured with bench/cmd/drift).
// Below this size the events cost less than leaving and rejoining the group and the two
// generation reads.
const unwatchedOps = 1024

// applyUnwatched applies tx while w is out of the nftables event group, so the kernel builds no
// event for it (unless some other process listens). What w cannot see meanwhile is accounted
// for by the ruleset generation, which every committed batch of the namespace increments: read
// before leaving and after rejoining, it must have moved by our batch alone; any other batch
// committed in between, to whatever table, is reported as Foreign{Unwatched: true}, and the
// caller verifies its tables. A batch committed just before leaving is also counted (its events
// were read too): a needless verification, never a missed change. If the generation cannot be
// read or the group cannot be left, tx is applied watched.
func (k *Kernel) applyUnwatched(ctx context.Context, tx *Transaction, w *Watcher) (Stats, error) {
	before, err := k.Generation(ctx)
	if err != nil || w.leave() != nil {
		return k.apply(ctx, tx)
	}
	if k.unwatchedHook != nil {
		k.unwatchedHook()
	}
	st, err := k.apply(ctx, tx)
	joinErr := w.join()
	after, genErr := k.Generation(ctx)
	// A refused batch commits nothing, so the generation must not have moved; an error after
	// which our commit is uncertain is verified like any other unexplained move.
	want := before
	if err == nil {
		want = nextGeneration(before)
	}
	if joinErr != nil || genErr != nil || after != want {
		w.missed(joinErr)
	}
	return st, err
}

// nextGeneration is the generation after g: the kernel skips 0 when its counter wraps.
func nextGeneration(g uint32) uint32 {
	if g++; g == 0 {
		g = 1
	}
	return g
}

// apply encodes and sends tx as one batch and reads the kernel's verdict.
func (k *Kernel) apply(ctx context.Context, tx *Transaction) (Stats, error) {
	st := Stats{Ops: tx.Len()}
	b, err := k.encode(ctx, tx)
	if err != nil {
		return st, err
	}
	st.Messages, st.Bytes = len(b.msgs)+2, len(b.w.b)
	if err := k.conn.growSnd(len(b.w.b)); err != nil {
		return st, fmt.Errorf("apply transaction (%d ops): %w", st.Ops, err)
	}
	// Error replies are small (capped, no echo of the request); make room for one per message.
	if err := k.conn.growRcv(len(b.msgs) * 1024); err != nil {
		return st, fmt.Errorf("apply transaction (%d ops): %w", st.Ops, err)
	}
	start := time.Now()
	if err := k.conn.send(ctx, b.w.b); err != nil {
		return st, fmt.Errorf("apply transaction (%d ops, %d bytes): send: %w", st.Ops, len(b.w.b), err)
	}
	err = k.collect(ctx, tx, b)
	st.Duration = time.Since(start)
	k.learnSets(tx, err)
	return st, err
}

// learnSets keeps the set cache in step with an applied transaction, or forgets the tables of a
// failed one (the kernel may not hold what we believe).
func (k *Kernel) learnSets(tx *Transaction, err error) {
	for _, op := range tx.Ops {
		t := kernelOpTable(tx, op)
		if err != nil {
			delete(k.sets, t)
			continue
		}
		switch o := op.Object.(type) {
		case *TableObj:
			if op.Verb == VerbDelete {
				delete(k.sets, t)
			}
		case *Set:
			switch op.Verb {
			case VerbAdd:
				if k.sets[t] != nil {
					k.sets[t][o.Name] = *o
				}
			case VerbDelete:
				delete(k.sets[t], o.Name)
			}
		}
	}
}

// kernelSetsOf returns the sets table t holds, from the cache or, with refresh or when the cache
// knows nothing of t, from the kernel.
func (k *Kernel) kernelSetsOf(ctx context.Context, t Table, refresh bool) (map[string]Set, error) {
	if m := k.sets[t]; m != nil && !refresh {
		return m, nil
	}
	k.setReads++
	sets, err := k.dumpSets(ctx, t)
	if err != nil && !IsNotFound(err) {
		return nil, fmt.Errorf("read sets of table %s: %w", t, err)
	}
	m := make(map[string]Set, len(sets))
	for _, s := range sets {
		m[s.Name] = s
	}
	k.sets[t] = m
	return m, nil
}

// kernelOpTable is the table op acts on (the transaction's if the op names none).
func kernelOpTable(tx *Transaction, op Op) Table {
	if op.Table.Name == "" {
		return tx.Table
	}
	return op.Table
}

// kernelSetKey names a set across the tables of one transaction.
type kernelSetKey struct {
	t    Table
	name string
}

// encode builds the batch: BATCH_BEGIN, the ops' messages, BATCH_END (with NLM_F_ACK).
func (k *Kernel) encode(ctx context.Context, tx *Transaction) (*codecBatch, error) {
	txSets := map[kernelSetKey]*codecSetInfo{}
	nextID := uint32(1)
	for _, op := range tx.Ops {
		if s, ok := op.Object.(*Set); ok && op.Verb == VerbAdd {
			key := kernelSetKey{kernelOpTable(tx, op), s.Name}
			if _, dup := txSets[key]; !dup {
				txSets[key] = &codecSetInfo{set: *s, id: nextID, modulus: s.NumgenKey}
				nextID++
			}
		}
	}
	codecNumgenModuli(tx, txSets)
	kernelSets := map[kernelSetKey]*codecSetInfo{}
	refreshed := map[Table]bool{}
	lookup := func(t Table, name string) (*codecSetInfo, error) {
		if s, ok := txSets[kernelSetKey{t, name}]; ok {
			return s, nil
		}
		if s, ok := kernelSets[kernelSetKey{t, name}]; ok {
			return s, nil
		}
		m, err := k.kernelSetsOf(ctx, t, false)
		if err != nil {
			return nil, err
		}
		s, ok := m[name]
		if !ok && !refreshed[t] {
			// The cache may be behind someone else's change: read the kernel once more.
			refreshed[t] = true
			if m, err = k.kernelSetsOf(ctx, t, true); err != nil {
				return nil, err
			}
			s, ok = m[name]
		}
		if !ok {
			return nil, codecNotFound("set %s not in table %s nor added by this transaction", name, t)
		}
		info := &codecSetInfo{set: s}
		kernelSets[kernelSetKey{t, name}] = info
		return info, nil
	}
	sets := func(b *codecBatch) func(string) (*codecSetInfo, error) {
		return func(name string) (*codecSetInfo, error) { return lookup(Table{Family: b.fam, Name: b.table}, name) }
	}
	// Two passes over the ops. The first encodes every message into a scratch buffer only to
	// measure the batch, and finds what cannot be encoded before anything is allocated for it;
	// the second writes the batch into a buffer of exactly that size. An estimate of the ops
	// overshoots, and a buffer grown by appending reaches up to twice the batch while the old and
	// the new buffer are both held (bench/README.md, "Memory: peak resident set").
	m := &codecBatch{measure: true}
	m.sets = sets(m)
	if err := m.encodeOps(tx); err != nil {
		return nil, err
	}
	b := &codecBatch{seq0: k.conn.nextSeq(tx.Len() + 2)}
	b.sets = sets(b)
	b.w.b = make([]byte, 0, m.size())
	b.msgs = make([]codecMsg, 0, len(m.msgs))
	if err := b.encodeOps(tx); err != nil {
		return nil, err // not reached: the same ops encoded in the first pass
	}
	return b, nil
}

// encodeOps appends BATCH_BEGIN, the messages of tx's ops and BATCH_END (with NLM_F_ACK) to b.
func (b *codecBatch) encodeOps(tx *Transaction) error {
	rc := &codecRuleCtx{sets: func(name string) (codecSetRef, error) {
		s, err := b.sets(name)
		if err != nil {
			return codecSetRef{}, err
		}
		return codecSetRef{interval: s.set.Interval, id: s.id, data: s.set.Data}, nil
	}}
	begin := b.w.beginMsg(unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, b.seq0, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	b.w.endMsg(begin)
	for i, op := range tx.All() {
		t := kernelOpTable(tx, op)
		b.switchTable(t)
		rc.fam = t.Family
		if err := b.addOp(i, op, rc); err != nil {
			oe := &OpError{Index: i, Op: codecOpName(op), Object: codecObjectDesc(t, op), Err: err}
			if errors.Is(err, syscall.ENOENT) {
				oe.Err = fmt.Errorf("%v: %w", err, syscall.ENOENT)
			} else {
				oe.Err = fmt.Errorf("%v: %w", err, syscall.EINVAL)
			}
			return fmt.Errorf("apply transaction (%d ops): nothing sent: %w", tx.Len(), oe)
		}
	}
	b.closeElems()
	// Each op yields at most one message (element ops share theirs), so the sequence numbers
	// reserved for the ops and the two batch messages cover BATCH_BEGIN, every message and
	// BATCH_END.
	endSeq := b.seq0 + 1 + uint32(len(b.msgs))
	if b.measure {
		b.measured += len(b.w.b)
		b.w.b = b.w.b[:0]
	}
	end := b.w.beginMsg(unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST|unix.NLM_F_ACK, endSeq, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	b.w.endMsg(end)
	return nil
}

// collect reads the kernel's verdict on the batch just sent. The kernel processed the batch
// synchronously inside sendmsg, so every reply is already queued: read until the queue is empty.
// Success: no error reply (kernels that honour NLM_F_ACK on BATCH_END also send its ACK).
// Failure: one error per refused message; the first becomes the returned OpError.
func (k *Kernel) collect(ctx context.Context, tx *Transaction, b *codecBatch) error {
	var errs []nlErrReply
	n := tx.Len()
	endSeq := b.seq0 + 1 + uint32(len(b.msgs))
	for {
		msgs, err := k.conn.recv(ctx, false)
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				// Only error replies can overflow the buffer (a commit sends at most one ACK), so
				// the batch was refused; the errors that did fit are still reported below.
				errs = append(errs, nlErrReply{errno: unix.ENOBUFS, seq: b.seq0, offset: -1,
					msg: "too many error replies for the receive buffer; the transaction was aborted"})
				continue
			}
			return fmt.Errorf("apply transaction (%d ops): read kernel replies: %w", n, err)
		}
		if msgs == nil {
			break
		}
		for _, m := range msgs {
			if m.typ != unix.NLMSG_ERROR || m.seq < b.seq0 || m.seq > endSeq {
				continue
			}
			e, err := nlParseError(m)
			if err != nil {
				return fmt.Errorf("apply transaction (%d ops): %w", n, err)
			}
			if e.errno != 0 {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].seq < errs[j].seq })
	first := k.opError(tx, b, errs[0])
	if first.Index >= 0 {
		seen := map[int]bool{first.Index: true}
		for _, e := range errs[1:] {
			if oe := k.opError(tx, b, e); oe.Index >= 0 && !seen[oe.Index] {
				seen[oe.Index] = true
				first.Also = append(first.Also, oe)
			}
		}
	}
	if len(errs) > 1 {
		return fmt.Errorf("apply transaction (%d ops): %d ops refused, first: %w", n, len(errs), first)
	}
	return fmt.Errorf("apply transaction (%d ops): %w", n, first)
}

// opError maps an error reply back to the op that caused it: by sequence number to the message,
// and for element lists by the failing attribute's offset to the element.
func (k *Kernel) opError(tx *Transaction, b *codecBatch, e nlErrReply) *OpError {
	i := int(e.seq) - int(b.seq0) - 1
	if i < 0 || i >= len(b.msgs) {
		return &OpError{Index: -1, Err: e.errno, Detail: e.msg}
	}
	idx := b.msgs[i].op
	if e.offset >= 0 {
		if j := b.elementOp(b.msgs[i], e.offset); j < tx.Len() {
			idx = j
		}
	}
	op := tx.Op(idx)
	return &OpError{Index: idx, Op: codecOpName(op), Object: codecObjectDesc(kernelOpTable(tx, op), op), Err: e.errno, Detail: e.msg}
}

// ListTables returns the names of the tables of family f.
func (k *Kernel) ListTables(ctx context.Context, f Family) ([]string, error) {
	var names []string
	err := k.conn.dump(ctx, unix.NFT_MSG_GETTABLE, f, nil, func(m nlMsg) error {
		if len(m.data) < nlNfgenLen || Family(m.data[0]) != f {
			return nil
		}
		a := nlAttrMap(m.data[nlNfgenLen:])
		names = append(names, nlStr(a[unix.NFTA_TABLE_NAME]))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %v tables: %w", f, err)
	}
	sort.Strings(names)
	return names, nil
}

// codecNumgenModuli finds, for each integer-keyed map added by tx, the modulus of the numgen that
// fills its key (its last key field): Set.NumgenKey if given, else from a DNATNumgen rule of tx
// naming it, else one more than its largest slot in tx.
func codecNumgenModuli(tx *Transaction, sets map[kernelSetKey]*codecSetInfo) {
	for _, op := range tx.Ops {
		if r, ok := op.Object.(*Rule); ok {
			for _, e := range r.Exprs {
				if d, ok := e.(DNATNumgen); ok {
					if s := sets[kernelSetKey{kernelOpTable(tx, op), d.Map}]; s != nil && s.set.NumgenKey == 0 {
						s.modulus = d.Modulus
					}
				}
			}
		}
	}
	// A full sync adds ~100k slots to a few maps, one map after the other: remember the last.
	var last *codecSetInfo
	var lastKey kernelSetKey
	var sc elementScratch
	for _, op := range tx.All() {
		el := sc.of(op.Object)
		if el == nil || op.Verb != VerbAdd || len(el.Key) == 0 || el.Key[len(el.Key)-1].Type != TypeInteger {
			continue
		}
		key := kernelSetKey{kernelOpTable(tx, op), el.Set}
		if last == nil || key != lastKey {
			if last, lastKey = sets[key], key; last == nil {
				continue
			}
		}
		if slot := el.Key[len(el.Key)-1]; last.set.NumgenKey == 0 && last.modulus <= slot.Num {
			last.modulus = slot.Num + 1
		}
	}
}
