// Package redisurl parses WEBHOOKD_REDIS_URL, the one place that does: a
// single Redis, a Sentinel-managed master or a Redis Cluster (SPEC §1).
// Everything in webhookd that talks to Redis (asynq's client, server and
// inspector, the rate limiter, the holder) shares the client it makes.
//
// The forms:
//
//	redis://[[user]:password@]host[:port][/db][?option=value…]
//	rediss://…                                      (the same over TLS)
//	redis-sentinel://[[user]:password@]host[:port][,host[:port]…][/db]?master=NAME[&sentinel_password=P][&option=value…]
//	rediss-sentinel://…                             (TLS to sentinels and master)
//	redis-cluster://[[user]:password@]host[:port][,host[:port]…][?option=value…]
//	rediss-cluster://…                              (TLS)
//
// Ports default to 6379, and to 26379 for sentinels. In the Sentinel form
// the hosts are the sentinels, the credentials are the master's, and
// sentinel_password is the sentinels' own password if they have one. A
// cluster has only database 0. The options are go-redis's URL options
// (dial_timeout, read_timeout, pool_size, …); an unknown one is an error.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Kind is the shape of the deployment a URL names.
type Kind string

// The kinds of Redis deployment.
const (
	Single   Kind = "single"
	Sentinel Kind = "sentinel"
	Cluster  Kind = "cluster"
)

// Options is a parsed WEBHOOKD_REDIS_URL: exactly one of Single, Failover
// and Cluster is set, as Kind says.
type Options struct {
	Kind     Kind
	Single   *redis.Options
	Failover *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// Parse parses a Redis URL in one of the package's forms. Errors never
// contain the password.
func Parse(raw string) (Options, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return Options{}, errors.New("not a URL: want redis://, rediss://, redis-sentinel:// or redis-cluster://")
	}
	base, kind, tls := "redis", Single, false
	switch strings.ToLower(scheme) {
	case "redis":
	case "rediss":
		tls = true
	case "redis-sentinel":
		kind = Sentinel
	case "rediss-sentinel":
		kind, tls = Sentinel, true
	case "redis-cluster":
		kind = Cluster
	case "rediss-cluster":
		kind, tls = Cluster, true
	default:
		return Options{}, fmt.Errorf("unknown scheme %q: want redis, rediss, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster", scheme)
	}
	if tls {
		base = "rediss"
	}

	// [userinfo@]hosts[/path][?query]; hosts may be a comma-separated list,
	// which net/url does not take, so the authority is split by hand.
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	defaultPort := "6379"
	if kind == Sentinel {
		defaultPort = "26379"
	}
	var addrs []string
	for _, h := range strings.Split(hosts, ",") {
		addr, err := hostPort(strings.TrimSpace(h), defaultPort)
		if err != nil {
			return Options{}, err
		}
		addrs = append(addrs, addr)
	}
	if kind == Single && len(addrs) > 1 {
		return Options{}, errors.New("a list of hosts needs redis-sentinel:// (the hosts are sentinels) or redis-cluster://")
	}
	u, err := url.Parse(base + "://" + userinfo + addrs[0] + pathQuery)
	if err != nil {
		return Options{}, fmt.Errorf("bad URL: %w", redact(err))
	}
	q := u.Query()
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}

	switch kind {
	case Single:
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return Options{}, redact(err)
		}
		return Options{Kind: Single, Single: o}, nil
	case Sentinel:
		master := q.Get("master")
		if q.Has("master_name") {
			master = q.Get("master_name")
		}
		if master == "" {
			return Options{}, errors.New("redis-sentinel:// needs ?master=NAME, the master's name the sentinels monitor")
		}
		sentinelPassword := q.Get("sentinel_password")
		q.Del("master")
		q.Del("sentinel_password")
		q.Set("master_name", master)
		// go-redis reads the userinfo as the sentinels' credentials; here
		// they are the master's, which is what a password usually guards.
		if u.User != nil {
			if name := u.User.Username(); name != "" {
				q.Set("username", name)
			}
			if p, ok := u.User.Password(); ok {
				q.Set("password", p)
			}
			u.User = nil
		}
		u.RawQuery = q.Encode()
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return Options{}, redact(err)
		}
		o.SentinelPassword = sentinelPassword
		return Options{Kind: Sentinel, Failover: o}, nil
	default:
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return Options{}, fmt.Errorf("redis-cluster:// has only database 0, not %q", p)
		}
		u.Path = ""
		u.RawQuery = q.Encode()
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return Options{}, redact(err)
		}
		return Options{Kind: Cluster, Cluster: o}, nil
	}
}

// hostPort checks one host[:port] of a URL and adds the default port.
func hostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", errors.New("a host is missing")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: a bare name, IPv4 address or [IPv6] address.
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort
		if strings.ContainsAny(host, "[]") {
			return "", fmt.Errorf("bad host %q", h)
		}
	}
	if host == "" {
		return "", fmt.Errorf("bad host %q: the name is empty", h)
	}
	return net.JoinHostPort(host, port), nil
}

// redact drops a *url.Error's URL, which may hold the password.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// NewClient makes the client o describes: a *redis.Client, a failover
// client that follows the sentinels to the current master, or a
// *redis.ClusterClient.
func (o Options) NewClient() redis.UniversalClient {
	switch o.Kind {
	case Sentinel:
		return redis.NewFailoverClient(o.Failover)
	case Cluster:
		return redis.NewClusterClient(o.Cluster)
	default:
		return redis.NewClient(o.Single)
	}
}

// DefaultDialTimeout sets the dial timeout of every connection the client
// makes (sentinels, master, cluster nodes) unless the URL set one.
func (o Options) DefaultDialTimeout(d time.Duration) {
	var p *time.Duration
	switch o.Kind {
	case Sentinel:
		p = &o.Failover.DialTimeout
	case Cluster:
		p = &o.Cluster.DialTimeout
	default:
		p = &o.Single.DialTimeout
	}
	if *p == 0 {
		*p = d
	}
}
