module github.com/nftproxy/nftproxy

go 1.26.0

require golang.org/x/sys v0.48.0
