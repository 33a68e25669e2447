package app

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/go-logr/logr"
)

// Every signal a node daemon may be sent has a defined, logged behaviour (README, "Signals"):
//   - SIGTERM, SIGINT: stop; the rules stay in the kernel (bounded by shutdownGrace).
//   - SIGHUP: a full resync where the command has one (run: read the kernel back and repair
//     any drift, as the periodic --full-sync-period does); logged and ignored elsewhere. Flags
//     and --config are not re-read: restart for those.
//   - SIGUSR1, SIGUSR2, SIGALRM: logged and ignored (Go ignores them silently by default; the
//     log shows they arrived and did nothing).
//   - SIGPIPE: ignored, logged once. Without a handler, a write to a closed stdout or stderr
//     (a log collector that went away) would end the process; with one, the write fails.
//   - SIGQUIT: Go's default, kept on purpose: every goroutine's stack is printed and the
//     process exits 2 (the way to see where a stuck daemon is).
//
// stopSignals end the command; heldSignals are logged and otherwise only do what the handler's
// hup says.
var (
	stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	heldSignals = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE}
)

// signalHandler is the daemon's signal handling; its context ends on a stop signal.
type signalHandler struct {
	log  logr.Logger
	what string // the command, for the log
	hup  atomic.Pointer[func()]
	ch   chan os.Signal
	done chan struct{}
	pipe sync.Once
}

// handleSignals starts handling every signal of stopSignals and heldSignals for a command; the
// returned context ends on the first stop signal, and stop ends the handling (the default
// behaviours return, except SIGPIPE's: it stays ignored, since the last log lines of a stopping
// daemon are written after stop and its log may be a closed pipe).
func handleSignals(log logr.Logger, what string) (context.Context, *signalHandler, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &signalHandler{log: log.WithName("signals"), what: what, ch: make(chan os.Signal, 8), done: make(chan struct{})}
	signal.Notify(h.ch, append(append([]os.Signal{}, stopSignals...), heldSignals...)...)
	go func() {
		defer close(h.done)
		for sig := range h.ch {
			h.handle(sig, cancel)
		}
	}()
	var once sync.Once
	return ctx, h, func() {
		once.Do(func() {
			swallowSIGPIPE()
			signal.Stop(h.ch)
			close(h.ch)
			<-h.done
			cancel()
		})
	}
}

// OnHangup sets what SIGHUP does from now on.
func (h *signalHandler) OnHangup(f func()) { h.hup.Store(&f) }

func (h *signalHandler) handle(sig os.Signal, cancel func()) {
	name := sig.String()
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT:
		h.log.Info("signal received: stopping; the rules stay in the kernel", "signal", name, "command", h.what)
		cancel()
	case syscall.SIGHUP:
		if f := h.hup.Load(); f != nil {
			h.log.Info("signal received: full resync (read the kernel back, repair drift); flags and --config are not re-read", "signal", name, "command", h.what)
			(*f)()
			return
		}
		h.log.Info("signal received and ignored: no resync to run (not started yet, or this command has none)", "signal", name, "command", h.what)
	case syscall.SIGPIPE:
		// Logged once: if the log itself is the closed pipe, every line would raise another.
		h.pipe.Do(func() {
			h.log.Info("signal received and ignored: a write to a closed pipe fails instead of ending the process (further SIGPIPEs are not logged)", "signal", name, "command", h.what)
		})
	default:
		h.log.Info("signal received and ignored", "signal", name, "command", h.what)
	}
}

var swallowPipe sync.Once

// swallowSIGPIPE keeps SIGPIPE caught, and dropped, for the rest of the process. It is not
// signal.Ignore: an ignored disposition is inherited by every program this process starts (a
// test's daemon among them), while a caught one returns to the default in the child.
func swallowSIGPIPE() {
	swallowPipe.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGPIPE)
		go func() {
			for range ch {
			}
		}()
	})
}
