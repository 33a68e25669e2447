// Command image builds nftproxy's container image without a container engine or a base
// image: a static binary per platform, FROM scratch, written as a multi-platform OCI image
// layout (and optionally an OCI archive). Nothing is pushed; `crane push DIR REF` or
// `skopeo copy oci:DIR docker://REF` does that (deploy/README.md). `make image` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	var (
		c         Config
		platforms string
		epoch     string
	)
	flag.StringVar(&c.Version, "version", "dev", "version stamped into the binary and the labels (make: git describe --always --dirty)")
	flag.StringVar(&c.Revision, "revision", "", "source commit for the org.opencontainers.image.revision label")
	flag.StringVar(&c.Ref, "ref", "", "the image's reference REGISTRY/REPO:TAG (names it in the layout; nothing is pushed); default "+DefaultRepo+":VERSION")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "platforms to build, comma-separated")
	flag.StringVar(&c.Out, "out", "bin/image", "OCI image-layout directory to write (replaced if it holds a layout)")
	flag.StringVar(&c.Tarball, "tarball", "", "also write the layout as this tar (an OCI archive); empty: none")
	flag.StringVar(&epoch, "created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time and file mtimes, Unix seconds (default $SOURCE_DATE_EPOCH, else 0): the same source gives the same digests")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q: every setting is a flag", flag.Args()))
	}
	if c.Ref == "" {
		c.Ref = DefaultRepo + ":" + c.Version
	}
	var err error
	if c.Platforms, err = ParsePlatforms(platforms); err != nil {
		fail(err)
	}
	sec := int64(0)
	if epoch != "" {
		if sec, err = strconv.ParseInt(epoch, 10, 64); err != nil {
			fail(fmt.Errorf("-created %q: want Unix seconds", epoch))
		}
	}
	c.Created = time.Unix(sec, 0).UTC()
	c.Go = os.Getenv("GO")
	c.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Build(ctx, c); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "push it with: crane push %s %s (or skopeo copy --all oci:%s:%s docker://%s)\n", c.Out, c.Ref, c.Out, tagOf(c.Ref), c.Ref)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

// tagOf is the tag of a checked reference (the image's name in the layout).
func tagOf(ref string) string {
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "TAG"
	}
	return t.TagStr()
}
