package controller

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/allocator"
)

func TestCheckRanges(t *testing.T) {
	r := allocator.MustParseRange
	linux := r("32768-60999") // the kernel's default ephemeral range
	cases := []struct {
		name      string
		blocks    string
		ephemeral allocator.Range
		reserved  []allocator.Range
		errHas    string // "" means valid
	}{
		{name: "the defaults", blocks: "1024-29999", ephemeral: linux},
		{name: "above the ephemeral range", blocks: "61000-65535", ephemeral: linux},
		{name: "no ephemeral range known", blocks: "40000-40999"},
		{name: "overlaps the API server's node ports", blocks: "29000-30000", ephemeral: linux,
			errHas: "overlaps the node-port range 30000-32767"},
		{name: "overlaps the ephemeral ports", blocks: "40000-40999", ephemeral: linux,
			errHas: "port 40000 is not in net.ipv4.ip_local_reserved_ports"},
		{name: "overlap reserved entirely", blocks: "40000-40999", ephemeral: linux,
			reserved: []allocator.Range{r("39000-40499"), r("40500-41000")}},
		{name: "overlap reserved except one port", blocks: "40000-40999", ephemeral: linux,
			reserved: []allocator.Range{r("40000-40499"), r("40501-41000")}, errHas: "port 40500 is not"},
		{name: "touches the ephemeral range's first port", blocks: "32768-32800", ephemeral: linux,
			errHas: "port 32768 is not"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRanges(r(tc.blocks), r("30000-32767"), tc.ephemeral, tc.reserved)
			switch {
			case tc.errHas == "" && err != nil:
				t.Errorf("got error %v, want none", err)
			case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
				t.Errorf("got error %v, want one containing %q", err, tc.errHas)
			}
		})
	}
}

func TestReadLocalPorts(t *testing.T) {
	dir := t.TempDir()
	rng, res := filepath.Join(dir, "range"), filepath.Join(dir, "reserved")
	if err := os.WriteFile(rng, []byte("32768\t60999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eph, reserved, err := ReadLocalPorts(rng, res)
	if err != nil || eph != allocator.MustParseRange("32768-60999") || reserved != nil {
		t.Errorf("without a reserved-ports file: got %v %v %v, want 32768-60999, none, no error", eph, reserved, err)
	}
	if err := os.WriteFile(res, []byte("40000-40999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, reserved, err = ReadLocalPorts(rng, res)
	if err != nil || len(reserved) != 1 {
		t.Errorf("with a reserved-ports file: got %v %v, want one range", reserved, err)
	}
	_, _, err = ReadLocalPorts(filepath.Join(dir, "missing"), res)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "hostNetwork") {
		t.Errorf("missing range file: got %v, want a not-exist error that says what to do", err)
	}
}
