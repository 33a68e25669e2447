package nft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// This file reads a table's elements and rules back on two netlink sockets at once.
//
// The kernel builds a dump's replies on the thread that reads them (each recvmsg builds the
// next), and walks a set from its first element again for every reply of at most 32 KiB, so a
// set's dump costs O(n²) of kernel time in its elements, all of it inside our recvmsg calls, and
// the largest set (the endpoint map) takes most of a read-back's kernel time (bench/README.md,
// section B, gives the split). With two sockets, each read by a goroutine of its own, the other
// sets are dumped while the largest is, on the machine's other core. Each goroutine decodes its
// own replies (cheap beside the kernel's dump) and hands
// the packed elements to the goroutine that called DumpPacked, which alone calls each: the
// reader's callback stays single-threaded, and runs while the kernel builds the next replies.

// dumpSocketsDefault is how many sockets a read-back uses. The sets are handed out one at a
// time, in the kernel's order, to whichever socket is free, so one socket dumps the largest
// set while the other dumps the rest; a third would only split the rest.
const dumpSocketsDefault = 2

// dumpPipeDepth is how many batches of packed elements (each up to decodePackChunk bytes of
// packings) may wait for the caller before the reading goroutines wait for it.
const dumpPipeDepth = 4

// dumpPipe carries batches of packed elements from the reading goroutines to the caller's.
type dumpPipe struct {
	full chan []Packed
	free chan []Packed // batches the caller is done with, for reuse
}

func newDumpPipe() *dumpPipe {
	return &dumpPipe{full: make(chan []Packed, dumpPipeDepth), free: make(chan []Packed, dumpPipeDepth+dumpSocketsDefault+1)}
}

// batch returns an empty batch with room for n elements, reused if one is free.
func (p *dumpPipe) batch(n int) []Packed {
	select {
	case b := <-p.free:
		if cap(b) >= n {
			return b[:0]
		}
	default:
	}
	return make([]Packed, 0, n)
}

// recycle gives back a batch the caller is done with.
func (p *dumpPipe) recycle(b []Packed) {
	select {
	case p.free <- b:
	default:
	}
}

// dumpConns returns the sockets a read-back uses: the Kernel's own and, when more than one is
// wanted, the second one, opened the first time. If it cannot be opened the read-back uses the
// Kernel's socket alone (it only costs time).
func (k *Kernel) dumpConns() []*nlConn {
	n := k.dumpSockets
	if n <= 0 {
		n = dumpSocketsDefault
	}
	if n == 1 {
		return []*nlConn{k.conn}
	}
	if k.dumpConn == nil {
		c, err := nlDial(k.netnsFD)
		if err != nil {
			return []*nlConn{k.conn}
		}
		k.dumpConn = c
	}
	return []*nlConn{k.conn, k.dumpConn}
}

// dumpContents reads back the elements of rs's sets and t's rules (rs holds its chains and
// sets). With each, the elements are handed to it packed, on the caller's goroutine, in the
// kernel's order within each set (the elements of two sets may come interleaved); without, they
// are put in rs.Elements. The first error stops every socket's dump and is returned.
func (k *Kernel) dumpContents(ctx context.Context, t Table, rs *Ruleset, each func(Packed)) error {
	conns := k.dumpConns()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nJobs := len(rs.Sets) + 1 // every set's elements, then the rules
	var next atomic.Int32
	var pipe *dumpPipe
	if each != nil {
		pipe = newDumpPipe()
	}
	elems := make([][]Element, len(rs.Sets))
	var rules []Rule
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chains := map[string]string{} // verdict chain names, shared by this socket's elements
			for {
				j := int(next.Add(1)) - 1
				if j >= nJobs {
					return
				}
				if k.dumpJobHook != nil {
					k.dumpJobHook(ctx, i, j)
				}
				var err error
				switch s := j; {
				case s == len(rs.Sets):
					if rules, err = k.dumpRules(ctx, c, t, rs); err != nil {
						err = fmt.Errorf("rules: %w", err)
					}
				case pipe != nil:
					if err = k.dumpPacked(ctx, c, t, &rs.Sets[s], chains, pipe); err != nil {
						err = fmt.Errorf("elements of set %s: %w", rs.Sets[s].Name, err)
					}
				default:
					if elems[s], err = k.dumpElements(ctx, c, t, &rs.Sets[s], chains); err != nil {
						err = fmt.Errorf("elements of set %s: %w", rs.Sets[s].Name, err)
					}
				}
				if err != nil {
					errs[i] = err
					cancel() // stop the other socket's dump
					return
				}
			}
		}()
	}
	if pipe != nil {
		go func() {
			wg.Wait()
			close(pipe.full)
		}()
		for b := range pipe.full {
			for i := range b {
				each(b[i])
			}
			pipe.recycle(b)
		}
	} else {
		wg.Wait()
	}
	if err := dumpFirstError(errs); err != nil {
		return err
	}
	rs.Rules = rules
	if each == nil {
		for i, els := range elems {
			if len(els) > 0 {
				rs.Elements[rs.Sets[i].Name] = els
			}
		}
	}
	return nil
}

// dumpFirstError picks the error to report of a read-back's sockets: one that is not only the
// cancellation another socket's error caused, if there is one.
func dumpFirstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil || (errors.Is(first, context.Canceled) && !errors.Is(err, context.Canceled)) {
			first = err
		}
	}
	return first
}
