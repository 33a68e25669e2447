package conntrack

// WithNetNSFd opens the netlink socket in the network namespace of fd, for the tests in package
// conntrack_test, which each run in a private one.
func WithNetNSFd(fd int) Option { return func(o *options) { o.nsFd = fd } }
