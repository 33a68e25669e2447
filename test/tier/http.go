package tier

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// getTimeout bounds one GET: a daemon that accepts and never answers fails the wait it is in.
const getTimeout = 5 * time.Second

// Response is what a GET inside a namespace got.
type Response struct {
	Code int
	// Status is the status line, e.g. "HTTP/1.1 200 OK".
	Status string
	Body   string
}

// Get sends GET url from inside ns (the connection is dialled there: the daemon's /healthz and
// /metrics listen on the node's loopback, health-check node ports on the node's addresses) and
// reads the whole answer. Any status is a Response; only a failed exchange is an error.
func Get(ctx context.Context, ns *netns.NS, url string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Response{}, err
	}
	resp, err := ns.HTTPClient(getTimeout).Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Code: resp.StatusCode, Status: resp.Proto + " " + resp.Status, Body: string(b)}, nil
}
