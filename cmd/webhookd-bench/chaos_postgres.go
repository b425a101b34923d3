package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// chaosPostgres is a throwaway PostgreSQL server of the chaos soak's own
// (initdb into a temporary directory, trust auth, fsync off, a free
// loopback port): the soak stops and starts it, which it must never do to
// the machine's shared server.
type chaosPostgres struct {
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string
	port int
	uid  int // run as this user (postgres refuses root); -1: as we are
	gid  int
}

// startChaosPostgres runs initdb and starts the server.
func startChaosPostgres(ctx context.Context) (_ *chaosPostgres, err error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(bins, func(i, j int) bool { // highest major version last
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bins[j]))))
		return vi < vj
	})
	initdb := ""
	if len(bins) > 0 {
		initdb = bins[len(bins)-1]
	} else if initdb, err = exec.LookPath("initdb"); err != nil {
		return nil, errors.New("no initdb: the chaos soak needs PostgreSQL's server binaries (Debian: apt-get install postgresql)")
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &chaosPostgres{bin: filepath.Dir(initdb), port: port, uid: -1, gid: -1}
	// Not a directory of ours alone: the postgres user must be able to enter it.
	if s.dir, err = os.MkdirTemp("", "webhookd-chaos-pg-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
		}
		s.uid, _ = strconv.Atoi(u.Uid)
		s.gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(s.dir, s.uid, s.gid); err != nil {
			return nil, err
		}
	}
	if err := s.run(ctx, "initdb", "-D", s.data(), "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	return s, s.Start(ctx)
}

func (s *chaosPostgres) data() string { return filepath.Join(s.dir, "data") }

// Addr is the server's host:port.
func (s *chaosPostgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// AdminURL is the server's postgres database.
func (s *chaosPostgres) AdminURL() string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// run runs one of the server's programs as the server's user.
func (s *chaosPostgres) run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if s.uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.gid)}
	}
	cmd.Dir = s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return nil
}

// Start starts the server and waits until it accepts connections.
func (s *chaosPostgres) Start(ctx context.Context) error {
	return s.run(ctx, "pg_ctl", "-D", s.data(), "-l", filepath.Join(s.dir, "postgres.log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300", s.port, s.dir),
		"start")
}

// Stop stops the server: mode "fast" ends sessions and rolls back open
// transactions; "immediate" is a crash (recovery at the next start).
func (s *chaosPostgres) Stop(ctx context.Context, mode string) error {
	return s.run(ctx, "pg_ctl", "-D", s.data(), "-m", mode, "-w", "-t", "60", "stop")
}

// Close stops the server if it runs and removes its files.
func (s *chaosPostgres) Close() {
	if s.dir == "" {
		return
	}
	s.Stop(context.Background(), "immediate")
	os.RemoveAll(s.dir)
}
