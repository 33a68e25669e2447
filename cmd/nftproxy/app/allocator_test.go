package app

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestAllocatorFlagErrors: every refused command line is a usage error (exit 2) that names
// the flag and what to do, found before any connection to the API server.
func TestAllocatorFlagErrors(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		errHas string
	}{
		{name: "bad block range", args: []string{"--range-node-port-range=5000-4000", "--ip-local-port-range=32768-60999"},
			errHas: "--range-node-port-range"},
		{name: "bad API server range", args: []string{"--service-node-port-range=x", "--ip-local-port-range=32768-60999"},
			errHas: "--service-node-port-range"},
		{name: "blocks overlap the API server's node ports", args: []string{"--range-node-port-range=29000-31000", "--ip-local-port-range=32768-60999"},
			errHas: "overlaps the node-port range 30000-32767"},
		{name: "blocks overlap ephemeral ports", args: []string{"--range-node-port-range=40000-40999", "--ip-local-port-range=32768-60999"},
			errHas: "ephemeral ports 32768-60999"},
		{name: "reserved ports without the range", args: []string{"--ip-local-reserved-ports=40000-40999"},
			errHas: "needs --ip-local-port-range"},
		{name: "stray argument", args: []string{"now"}, errHas: "unexpected arguments"},
		{name: "healthz address without port", args: []string{"--healthz-bind-address=0.0.0.0"}, errHas: "--healthz-bind-address"},
		{name: "metrics address without port", args: []string{"--metrics-bind-address=localhost"}, errHas: "--metrics-bind-address"},
		{name: "renew deadline not below lease duration", args: []string{"--ip-local-port-range=32768-60999",
			"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=5s", "--master=https://127.0.0.1:1"},
			errHas: "must be shorter than the lease duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := allocatorCmd(tc.args, &stderr)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("got %v (usage error: %v), want a usage error containing %q", err, errors.As(err, &ue), tc.errHas)
			}
		})
	}
}

// TestAllocatorReservedPortsAllowOverlap: ephemeral ports reserved on the node may hold blocks.
func TestAllocatorReservedPortsAllowOverlap(t *testing.T) {
	o, err := parseAllocatorFlags([]string{"--range-node-port-range=40000-40999", "--ip-local-port-range=32768-60999",
		"--ip-local-reserved-ports=40000-40999"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := o.ranges(); err != nil || b.String() != "40000-40999" {
		t.Errorf("ranges: got %v, %v; want 40000-40999 and no error", b, err)
	}
}

func TestAllocatorHelp(t *testing.T) {
	var stderr bytes.Buffer
	if err := allocatorCmd([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: got %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"range-node-port-range", "service-node-port-range", "ip-local-port-range", "lease-namespace", "identity",
		"healthz-bind-address", "metrics-bind-address"} {
		if !strings.Contains(stderr.String(), "-"+f) {
			t.Errorf("help does not explain --%s", f)
		}
	}
}
