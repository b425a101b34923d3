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
}

// startRedis starts redis-server in dir and waits until it answers PING.
func startRedis(ctx context.Context, dir string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"), "--maxmemory-policy", "noeviction")
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &redisServer{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	s.Client = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 64})
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

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
