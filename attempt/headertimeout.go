package attempt

import (
	"context"
	"net/http"
	"time"
)

// RoundTripWithin sends req through rt and gives the upstream d to answer
// with response headers; http.Transport has one ResponseHeaderTimeout for all
// hosts, while each format has its own proxy_timeout. On success the attempt
// context stays alive for the body and release must be called once the body
// is done with. On failure the error is ErrHeaderTimeout when the wait ran
// out, else the transport's error, and nothing needs releasing.
func RoundTripWithin(rt http.RoundTripper, req *http.Request, d time.Duration) (
	resp *http.Response, attempt context.Context, release context.CancelCauseFunc, err error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(d, func() { cancel(ErrHeaderTimeout) })
	resp, err = rt.RoundTrip(req.WithContext(ctx))
	if !timer.Stop() && err == nil {
		// The timer fired just as the headers arrived; the context is
		// already cancelled, so the body is unreadable: treat it as the
		// timeout it nearly was.
		resp.Body.Close()
		resp, err = nil, context.Cause(ctx)
	}
	if err != nil {
		if context.Cause(ctx) == ErrHeaderTimeout {
			err = ErrHeaderTimeout
		}
		cancel(nil)
		return nil, nil, nil, err
	}
	return resp, ctx, cancel, nil
}
