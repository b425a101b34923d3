package redisurl

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseForms(t *testing.T) {
	t.Parallel()
	o, err := Parse("redis://:secret@cache.internal:6380/3?dial_timeout=5s")
	if err != nil || o.Kind != Single || o.Single.Addr != "cache.internal:6380" || o.Single.DB != 3 ||
		o.Single.Password != "secret" || o.Single.DialTimeout != 5*time.Second || o.Single.TLSConfig != nil {
		t.Errorf("redis://: %+v, %v", o.Single, err)
	}
	o, err = Parse("rediss://cache.internal")
	if err != nil || o.Single.Addr != "cache.internal:6379" || o.Single.TLSConfig == nil {
		t.Errorf("rediss://: %+v, %v", o.Single, err)
	}

	o, err = Parse("redis-sentinel://app:pw@s1:26380,s2,[::1]:26381/2?master=mymaster&sentinel_password=spw&pool_size=7")
	if err != nil || o.Kind != Sentinel {
		t.Fatalf("redis-sentinel://: %+v, %v", o, err)
	}
	f := o.Failover
	if f.MasterName != "mymaster" || !reflect.DeepEqual(f.SentinelAddrs, []string{"s1:26380", "s2:26379", "[::1]:26381"}) ||
		f.DB != 2 || f.Username != "app" || f.Password != "pw" || f.SentinelPassword != "spw" || f.SentinelUsername != "" ||
		f.PoolSize != 7 || f.TLSConfig != nil {
		t.Errorf("redis-sentinel://: %+v", f)
	}
	o, err = Parse("rediss-sentinel://s1?master_name=m")
	if err != nil || o.Failover.MasterName != "m" || o.Failover.TLSConfig == nil || o.Failover.SentinelAddrs[0] != "s1:26379" {
		t.Errorf("rediss-sentinel://: %+v, %v", o.Failover, err)
	}

	o, err = Parse("redis-cluster://:pw@n1:7000,n2:7001,n3:7002?read_timeout=2s")
	if err != nil || o.Kind != Cluster {
		t.Fatalf("redis-cluster://: %+v, %v", o, err)
	}
	c := o.Cluster
	if !reflect.DeepEqual(c.Addrs, []string{"n1:7000", "n2:7001", "n3:7002"}) || c.Password != "pw" || c.ReadTimeout != 2*time.Second {
		t.Errorf("redis-cluster://: %+v", c)
	}
	if o, err := Parse("redis-cluster://n1/0"); err != nil || len(o.Cluster.Addrs) != 1 {
		t.Errorf("redis-cluster:// with /0: %+v, %v", o, err)
	}

	o, _ = Parse("redis-sentinel://s1?master=m")
	o.DefaultDialTimeout(2 * time.Second)
	if o.Failover.DialTimeout != 2*time.Second {
		t.Errorf("DefaultDialTimeout: %v", o.Failover.DialTimeout)
	}
	o, _ = Parse("redis://h?dial_timeout=9s")
	o.DefaultDialTimeout(2 * time.Second)
	if o.Single.DialTimeout != 9*time.Second {
		t.Errorf("DefaultDialTimeout overrode the URL's: %v", o.Single.DialTimeout)
	}
}

func TestParseRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"localhost:6379":                           "not a URL",
		"http://localhost":                         "unknown scheme",
		"redis://a:1,b:2":                          "a list of hosts needs",
		"redis-sentinel://s1,s2/0":                 "needs ?master=NAME",
		"redis-cluster://n1/3":                     "only database 0",
		"redis-cluster://n1,,n2":                   "a host is missing",
		"redis://:hunter2@h/x":                     "invalid database number",
		"redis-sentinel://:hunter2@s?master=m&x=1": "unexpected option",
		"redis-cluster://:hunter2@h?bogus=1":       "unexpected option",
	} {
		_, err := Parse(raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", raw, err, want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q): the error shows the password: %v", raw, err)
		}
	}
}
