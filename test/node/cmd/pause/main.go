// Command pause is the pod sandbox's process for the node tier (containerd's sandbox_image):
// it holds the pod's namespaces, reaps children and exits 0 on SIGTERM or SIGINT. Built into an
// image FROM scratch by test/node, so no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// As PID 1 of the pod it inherits orphans; reap them so none stays a zombie.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
