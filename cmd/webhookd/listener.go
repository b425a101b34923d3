package main

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// listener is one HTTP listener of the process (the API, the ops listener)
// with its open connections, so that a drain cut short can say how many
// requests it cut.
type listener struct {
	name string // "api" or "ops", for the log
	addr string // the bound address
	srv  *http.Server

	mu    sync.Mutex
	conns map[net.Conn]http.ConnState // open connections; closed ones leave
	empty chan struct{}               // when set, closed as the last connection leaves
}

// track is the server's ConnState hook.
func (l *listener) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateClosed || s == http.StateHijacked {
		delete(l.conns, c)
		if len(l.conns) == 0 && l.empty != nil {
			close(l.empty)
			l.empty = nil
		}
		return
	}
	l.conns[c] = s
}

// inRequest counts the connections in the middle of a request.
func (l *listener) inRequest() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.conns {
		if s == http.StateActive {
			n++
		}
	}
	return n
}

// drain stops accepting and waits for the requests in flight to be
// answered. If ctx ends first it closes the connections left, waits for
// their handlers to return (they see the connection gone at once, and the
// API's are bounded by its request timeout besides) and returns how many of
// them were in a request: a drain cut at its bound is not an error (SPEC
// §1: exit 0 on SIGTERM). Either way, every handler has returned, so what
// they handed on (the API's work after its answers) is counted where the
// caller waits for it.
func (l *listener) drain(ctx context.Context) (cut int, err error) {
	if err := l.srv.Shutdown(ctx); err == nil || ctx.Err() == nil {
		return 0, err
	}
	cut = l.inRequest()
	l.srv.Close() // its error can only be about the listener, closed already
	l.mu.Lock()
	if len(l.conns) == 0 {
		l.mu.Unlock()
		return cut, nil
	}
	l.empty = make(chan struct{})
	empty := l.empty
	l.mu.Unlock()
	<-empty
	return cut, nil
}
