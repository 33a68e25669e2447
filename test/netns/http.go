package netns

import (
	"context"
	"net"
	"net/http"
	"time"
)

// HTTPClient returns a client whose connections are dialled inside the namespace (each on a
// thread switched into it), for tests and tools that ask a daemon's /metrics or /healthz
// there. No keep-alives: nothing lingers once the test moves on.
func (ns *NS) HTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}
