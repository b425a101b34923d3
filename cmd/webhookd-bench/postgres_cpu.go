package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The CPU time of the PostgreSQL server the scenarios run on, when it runs
// on this machine: the postmaster's own, its children's that have exited
// (the kernel adds them to the postmaster's when it reaps them) and its
// live children's. It counts the whole server, other databases' work too;
// on a machine where only the tool uses it, that is webhookd's load.

// postmasterPID is the pid of the local PostgreSQL server behind dbURL,
// or 0 when it cannot be seen from here (a server on another machine or
// in a container, or a /proc without it).
func postmasterPID(ctx context.Context, dbURL string) int {
	var backend int
	if err := queryOne(ctx, dbURL, "SELECT pg_backend_pid()", nil, &backend); err != nil {
		return 0
	}
	st, err := readStat(backend)
	if err != nil || !isPostgres(backend) || !isPostgres(st.ppid) {
		return 0 // the pid is some other process here: the server is not local
	}
	return st.ppid
}

// isPostgres reports whether pid's executable is named like PostgreSQL's.
func isPostgres(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil { // another user's process: its name, then
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return err == nil && strings.HasPrefix(string(comm), "postgres")
	}
	return strings.HasPrefix(filepath.Base(exe), "postgres")
}

// serverCPUTime is the CPU time of the process tree under the postmaster
// pid so far.
func serverCPUTime(pid int) (time.Duration, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	total := st.self + st.reaped
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil || child == pid {
			continue
		}
		if c, err := readStat(child); err == nil && c.ppid == pid { // a child that exits meanwhile is skipped
			total += c.self
		}
	}
	return total, nil
}

// procStat is what serverCPUTime needs of /proc/<pid>/stat.
type procStat struct {
	ppid   int
	self   time.Duration // utime + stime
	reaped time.Duration // cutime + cstime: children waited for
}

func readStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(data))
}

// parseStat reads a /proc/<pid>/stat line. Times are in clock ticks, 100 a
// second on Linux (USER_HZ).
func parseStat(line string) (procStat, error) {
	// The command name, in parentheses, may hold spaces and parentheses:
	// count from after its last ")".
	i := strings.LastIndex(line, ") ")
	if i < 0 {
		return procStat{}, errors.New("unexpected /proc stat")
	}
	f := strings.Fields(line[i+2:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, errors.New("unexpected /proc stat")
	}
	var n [5]int64
	for j, k := range []int{1, 11, 12, 13, 14} { // ppid, utime, stime, cutime, cstime
		v, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("unexpected /proc stat: %w", err)
		}
		n[j] = v
	}
	tick := time.Second / 100
	return procStat{ppid: int(n[0]), self: time.Duration(n[1]+n[2]) * tick, reaped: time.Duration(n[3]+n[4]) * tick}, nil
}

// queryOne runs sql with args on a connection of its own to dbURL and
// scans its one row into dest.
func queryOne(ctx context.Context, dbURL, sql string, args []any, dest ...any) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// walPosition is the server's WAL insert position, or "" when it cannot
// be read. The WAL written between two positions is what every write cost
// PostgreSQL on disk, whatever else the machine did meanwhile: a figure
// of the write path's work that the CPU times' noise does not blur.
func walPosition(ctx context.Context, dbURL string) string {
	var lsn string
	if err := queryOne(ctx, dbURL, "SELECT pg_current_wal_lsn()::text", nil, &lsn); err != nil {
		return ""
	}
	return lsn
}

// walSince is the WAL the whole server wrote since position from, in bytes.
func walSince(dbURL, from string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n float64
	err := queryOne(ctx, dbURL, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8", []any{from}, &n)
	return n, err
}
