package allocator

import "math/bits"

// bitmap is one bit per port offset in the range: set means allocated. Owners are kept apart
// (see Allocator) because they are only needed on release, snapshot and error paths, while the
// scans below run on every allocation and want the dense form.
type bitmap []uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) get(i int) bool { return b[i/64]&(1<<(uint(i)%64)) != 0 }
func (b bitmap) set(i int)      { b[i/64] |= 1 << (uint(i) % 64) }
func (b bitmap) clear(i int)    { b[i/64] &^= 1 << (uint(i) % 64) }

// setRun marks [lo, hi) allocated or free.
func (b bitmap) setRun(lo, hi int, on bool) {
	for i := lo; i < hi; i++ {
		if on {
			b.set(i)
		} else {
			b.clear(i)
		}
	}
}

// firstFree returns the lowest clear bit in [lo, hi), or -1. Whole words that are full are
// skipped in one step, so a nearly full 64k range costs about a thousand word reads.
func (b bitmap) firstFree(lo, hi int) int {
	for i := lo; i < hi; {
		w := i / 64
		free := ^b[w] >> (uint(i) % 64) // free bits from i to the end of the word
		if free != 0 {
			j := i + bits.TrailingZeros64(free)
			if j < hi {
				return j
			}
			return -1
		}
		i = (w + 1) * 64
	}
	return -1
}

// firstSet returns the lowest set bit in [lo, hi), or -1.
func (b bitmap) firstSet(lo, hi int) int {
	for i := lo; i < hi; {
		w := i / 64
		used := b[w] >> (uint(i) % 64)
		if used != 0 {
			j := i + bits.TrailingZeros64(used)
			if j < hi {
				return j
			}
			return -1
		}
		i = (w + 1) * 64
	}
	return -1
}

// freeFrom returns the first clear bit in [lo, hi) at or after start, wrapping around to lo; -1
// if [lo, hi) is full. This is the random-scan strategy: start is random, the scan is not.
func (b bitmap) freeFrom(lo, hi, start int) int {
	if j := b.firstFree(start, hi); j >= 0 {
		return j
	}
	return b.firstFree(lo, start)
}
