package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgServer is a throwaway PostgreSQL server a drill starts, stops and
// starts again: initdb into a temporary directory, trust auth, a free
// loopback port, fsync off.
type pgServer struct {
	t    *testing.T
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string
	port string
	uid  int // run as this user (postgres refuses root); -1: as we are
	gid  int
}

// startPostgres starts a throwaway PostgreSQL server, or skips the test
// when PostgreSQL's server binaries are not installed.
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(bins, func(i, j int) bool { // highest major version last
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[j]))))
		return vi < vj
	})
	initdb := ""
	if len(bins) > 0 {
		initdb = bins[len(bins)-1]
	} else if p, err := exec.LookPath("initdb"); err == nil {
		initdb = p
	} else {
		t.Skip("skipped: no initdb (PostgreSQL server binaries) installed to start a throwaway PostgreSQL; " +
			"Debian: apt-get install postgresql (.ci/run installs it)")
	}
	s := &pgServer{t: t, bin: filepath.Dir(initdb), port: freePort(t), uid: -1, gid: -1}
	// Not t.TempDir: the postgres user must be able to enter it.
	dir, err := os.MkdirTemp("", "webhookd-drill-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("skipped: running as root and there is no postgres user to run a throwaway PostgreSQL as: %v", err)
		}
		s.uid, _ = strconv.Atoi(u.Uid)
		s.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, s.uid, s.gid); err != nil {
			t.Fatal(err)
		}
	}
	s.run(filepath.Join(s.bin, "initdb"), "-D", s.data(), "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	s.start()
	t.Cleanup(func() {
		s.asOwner(exec.Command(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-m", "immediate", "-w", "stop")).Run()
	})
	return s
}

func (s *pgServer) data() string { return filepath.Join(s.dir, "data") }

// URL is the server's postgres database.
func (s *pgServer) URL() string {
	return "postgres://postgres@127.0.0.1:" + s.port + "/postgres?sslmode=disable"
}

// asOwner makes cmd run as the server's user.
func (s *pgServer) asOwner(cmd *exec.Cmd) *exec.Cmd {
	if s.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid)}}
	}
	cmd.Dir = s.dir
	return cmd
}

func (s *pgServer) run(name string, args ...string) {
	s.t.Helper()
	cmd := s.asOwner(exec.Command(name, args...))
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
}

// start starts the server and waits until it accepts connections.
func (s *pgServer) start() {
	s.t.Helper()
	s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60",
		"-o", "-p "+s.port+" -k "+s.dir+" -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", "start")
}

// stop stops the server with `pg_ctl stop -m fast`: sessions are ended,
// open transactions rolled back.
func (s *pgServer) stop() {
	s.t.Helper()
	s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-m", "fast", "-w", "-t", "60", "stop")
}

// redisServer is a throwaway redis-server on a loopback port.
type redisServer struct {
	t    *testing.T
	port string
	args []string
	cmd  *exec.Cmd
}

// startRedisServer starts redis-server on port with args added (the
// first may be a config file) and waits until it accepts connections. Its
// files (a replica's dump.rdb, say) go to a temporary directory unless
// args name a --dir. The test kills it when it ends.
func startRedisServer(t *testing.T, port string, args ...string) *redisServer {
	t.Helper()
	if !slices.Contains(args, "--dir") {
		args = append(args, "--dir", t.TempDir())
	}
	s := &redisServer{t: t, port: port, args: args}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) start() {
	s.t.Helper()
	args := append([]string{"--port", s.port, "--bind", "127.0.0.1"}, s.args...)
	if len(s.args) > 0 && !strings.HasPrefix(s.args[0], "--") { // a config file comes first
		args = append([]string{s.args[0], "--port", s.port, "--bind", "127.0.0.1"}, s.args[1:]...)
	}
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redis-server (Debian package redis-server): %v", err)
	}
	waitFor(s.t, 10*time.Second, "redis-server on port "+s.port, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+s.port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// kill kills the server with SIGKILL, if it runs.
func (s *redisServer) kill() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
		s.cmd = nil
	}
}
