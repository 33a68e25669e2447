package metrics

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfo is the name of the build information gauge, Kubernetes components' (component-base)
// name and labels, so fleet dashboards that list versions by kubernetes_build_info list
// nftproxy's too. Its value is 1; the labels carry nftproxy's own version.
const BuildInfo = "kubernetes_build_info"

// RegisterBuildInfo registers kubernetes_build_info for version (nftproxy's, set at build time).
// major and minor come from a version like v1.2.3; the commit and whether the tree was modified
// come from what the Go toolchain stamped into the binary; build_date is the commit's time (the
// build itself is reproducible, so it has no date of its own). Unknown values are empty.
func RegisterBuildInfo(reg prometheus.Registerer, version string) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: BuildInfo,
		Help: "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which nftproxy was built, and platform on which it is running."},
		[]string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"})
	if err := reg.Register(g); err != nil {
		return err
	}
	major, minor := majorMinor(version)
	commit, tree, date := vcsStamp()
	g.WithLabelValues(major, minor, version, commit, tree, date, runtime.Version(), runtime.Compiler,
		runtime.GOOS+"/"+runtime.GOARCH).Set(1)
	return nil
}

// majorMinor returns the first two numbers of a version like v1.2.3 or 1.2.3-rc.1, or empty
// strings for a version that is not one ("dev").
func majorMinor(version string) (string, string) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || !digits(parts[0]) || !digits(parts[1]) {
		return "", ""
	}
	return parts[0], parts[1]
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// vcsStamp reads the commit, the tree state (clean or dirty, component-base's values) and the
// commit time the Go toolchain recorded at build time.
func vcsStamp() (commit, tree, date string) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", "", ""
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.time":
			date = s.Value
		case "vcs.modified":
			tree = "clean"
			if s.Value == "true" {
				tree = "dirty"
			}
		}
	}
	return commit, tree, date
}
