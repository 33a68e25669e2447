package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildDaemon compiles this module's nftproxy binary (static, CGO_ENABLED=0) into dir and
// returns its path, for tiers that run the real daemon in a lab (TestMain builds it once).
// It names the package by import path, so it works from any directory inside the module.
func BuildDaemon(dir string) (string, error) {
	bin := filepath.Join(dir, "nftproxy")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nftproxy/nftproxy/cmd/nftproxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the nftproxy daemon: %w\n%s", err, out)
	}
	return bin, nil
}
