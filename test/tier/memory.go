package tier

import (
	"os"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// This file holds what the in-process memory measurements share (manifest mode's bench/cmd/heap,
// Kubernetes mode's BenchmarkKubeMemoryProfile in cmd/nftproxy/app).

// SamplePeakHeap samples the heap in use (objects plus unused spans, HeapInuse) every 2 ms
// until the returned function is called, which returns the largest value seen.
func SamplePeakHeap() func() uint64 {
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64() + s[1].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

// ResetPeakRSS resets this process's VmHWM (writing 5 to clear_refs), so PeakRSS(os.Getpid())
// measures what follows only. On an error the peak keeps what came before; the caller says so.
func ResetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// EnvInt is the integer in environment variable name, def when it is unset; a value that is
// not an integer fails t.
func EnvInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// MiB is n bytes in MiB.
func MiB(n uint64) float64 { return float64(n) / (1 << 20) }
