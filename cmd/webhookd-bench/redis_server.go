package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server on a free loopback port, with no
// persistence, in a directory of its own. Client is connected to it.
type redisServer struct {
	URL    string
	Client *redis.Client
	cmd    *exec.Cmd
	done   chan struct{}
	port   int
	dir    string
}

// startRedis starts redis-server in dir and waits until it answers PING.
func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &redisServer{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), port: port, dir: dir}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs the server process on s's port and waits until it answers.
func (s *redisServer) start(ctx context.Context) error {
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"), "--maxmemory-policy", "noeviction")
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.done)
	s.Client = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), PoolSize: 64})
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Restart starts a stopped server again on the same port, empty (it keeps
// nothing on disk): as if Redis had been lost and replaced.
func (s *redisServer) Restart(ctx context.Context) error { return s.start(ctx) }

// waitReady polls PING until it answers, the process exits, or 10 s pass.
func (s *redisServer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.Client.Ping(ctx).Err() == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("redis-server exited at start")
		case <-ctx.Done():
			return fmt.Errorf("redis-server not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Info returns one field of INFO section (used_memory, redis_version).
func (s *redisServer) Info(ctx context.Context, section, field string) (string, error) {
	text, err := s.Client.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("redis INFO %s: %w", section, err)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis INFO %s has no %s", section, field)
}

// UsedMemory is INFO memory's used_memory in bytes.
func (s *redisServer) UsedMemory(ctx context.Context) (int64, error) {
	v, err := s.Info(ctx, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// Stop kills the server and waits for it to go.
func (s *redisServer) Stop() {
	s.Client.Close()
	s.cmd.Process.Kill()
	<-s.done
}
