// Package redisbatch sends concurrent Redis Lua script calls together in one
// pipeline. The API process runs many small scripts at once (the rate
// limiter, asynq's enqueue), and a batch costs one write and one read
// syscall however many calls it carries, instead of a pair for each.
//
// It is hand-written where go-redis alone would do, so it stays only while
// webhookd with it beats webhookd without it (go-redis's own calls) by at
// least 5% of a make bench figure, measured in alternating runs of one
// session; the commit that last measured it gives the figures.
package redisbatch

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookd/webhookd/internal/warm"
)

const (
	// maxInFlight is how many pipelines may run at once. A call that arrives
	// while this many are running waits and goes with the next batch.
	maxInFlight = 2
	// maxBatch caps the calls in one pipeline.
	maxBatch = 256
	// execTimeout bounds a pipeline. It runs on its own context, not any one
	// caller's, so that a caller giving up does not fail the others.
	execTimeout = 5 * time.Second
)

// Client is a redis.UniversalClient whose EvalSha, Eval, EvalShaRO and EvalRO
// calls are sent in batches. Every other method, Close included, is the
// wrapped client's own.
//
// A batch is one go-redis pipeline: hooks on the wrapped client see it as a
// pipeline (ProcessPipelineHook), not as single commands, and its context
// carries none of the callers' values.
type Client struct {
	redis.UniversalClient

	mu      sync.Mutex
	pending []*call
	running int // goroutines running batches; each exits when none is pending
	// warm runs them on goroutines that outlive a batch: a pipeline's call
	// path grew the stack of a goroutine made per batch anew each time.
	warm *warm.Pool
}

// call is one script call waiting for its batch.
type call struct {
	ctx  context.Context
	cmd  *redis.Cmd
	done chan struct{} // closed once cmd holds its reply or error
}

// Wrap returns rdb with EvalSha, Eval, EvalShaRO and EvalRO calls that arrive
// while another batch is in flight sent together in one pipeline. A call with
// nothing in flight is sent at once (on its own goroutine when its context
// cannot end: goAlone). Every other method is rdb's own. The
// goroutines Wrap starts exit a minute after the last call, so closing rdb
// is enough.
func Wrap(rdb redis.UniversalClient) *Client {
	return &Client{UniversalClient: rdb, warm: warm.New(time.Minute)}
}

// EvalSha runs EVALSHA in the next batch. It returns the command's own
// reply or error (redis.ErrNoScript for an unknown script, so Script.Run
// falls back to Eval), or ctx's error if ctx ends before the reply.
func (c *Client) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, c.UniversalClient.Pipeline().EvalSha(ctx, sha1, keys, args...))
}

// Eval runs EVAL in the next batch; errors as EvalSha.
func (c *Client) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, c.UniversalClient.Pipeline().Eval(ctx, script, keys, args...))
}

// EvalShaRO runs EVALSHA_RO in the next batch; errors as EvalSha.
func (c *Client) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, c.UniversalClient.Pipeline().EvalShaRO(ctx, sha1, keys, args...))
}

// EvalRO runs EVAL_RO in the next batch; errors as EvalSha.
func (c *Client) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.do(ctx, c.UniversalClient.Pipeline().EvalRO(ctx, script, keys, args...))
}

// do queues cmd and waits for its batch or for ctx. The Eval methods build
// cmd on a throwaway pipeline that is never run: that gives the exact
// command rdb's own method would send (argument flattening, first-key
// position for cluster routing).
func (c *Client) do(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	args := cmd.Args()
	cl := &call{ctx: ctx, cmd: cmd, done: make(chan struct{})}
	c.mu.Lock()
	if ctx.Done() == nil && c.running == 0 {
		c.running++
		c.mu.Unlock()
		c.goAlone(cl)
		return noScript(cmd)
	}
	c.pending = append(c.pending, cl)
	start := c.running < maxInFlight
	if start {
		c.running++
	}
	c.mu.Unlock()
	if start {
		c.warm.Go(c.run)
	}

	select {
	case <-cl.done:
		return noScript(cmd)
	case <-ctx.Done():
		// The batch may still write into cmd: answer with a command of our own.
		gone := redis.NewCmd(ctx, args...)
		gone.SetErr(ctx.Err())
		return gone
	}
}

// goAlone sends cl, which counts as a batch in flight, at once and on its
// caller's goroutine. do takes this way for a caller that cannot give up
// (a context without Done, as asynq's polls for the next task have) when
// nothing is in flight: the hand-off to a batch goroutine and back is two
// goroutine wake-ups, and at rest, where every call is alone, those are
// much of a poll's CPU. Calls that arrive meanwhile batch as before.
//
// Nothing is left behind in pending: only a call alone goes this way, so
// one that arrives meanwhile finds room for a batch goroutine of its own or
// the one such goroutine already running, which takes pending until none is
// left.
func (c *Client) goAlone(cl *call) {
	c.exec([]*call{cl})
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
}

// noScript returns cmd, with a missing script reported as rdb's own Eval
// methods do (redis.ErrNoScript).
func noScript(cmd *redis.Cmd) *redis.Cmd {
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd.SetErr(redis.ErrNoScript)
	}
	return cmd
}

// run sends the pending calls, at most maxBatch per pipeline, until none is
// left, and then exits.
func (c *Client) run() {
	for {
		c.mu.Lock()
		batch := c.pending
		if len(batch) > maxBatch {
			batch, c.pending = batch[:maxBatch:maxBatch], batch[maxBatch:]
		} else {
			c.pending = nil
		}
		if len(batch) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.exec(batch)
	}
}

// exec sends batch in one pipeline and wakes its callers. go-redis stores
// each reply or error (NOSCRIPT, WRONGTYPE, …) in its own command; a
// connection error is stored in all of them.
func (c *Client) exec(batch []*call) {
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	pipe := c.UniversalClient.Pipeline()
	for _, cl := range batch {
		if err := cl.ctx.Err(); err != nil {
			cl.cmd.SetErr(err) // its caller is gone or going: don't run its script
			continue
		}
		_ = pipe.Process(ctx, cl.cmd)
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // the errors are in the commands
	}
	for _, cl := range batch {
		close(cl.done)
	}
}
