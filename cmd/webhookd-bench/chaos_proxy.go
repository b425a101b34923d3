package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// faultProxies is toxiproxy embedded in the tool: one TCP proxy on
// loopback for each (webhookd process, backend) pair, so a toxic cuts or
// slows one process's connections to PostgreSQL or Redis for real.
type faultProxies struct {
	server  *toxiproxy.ApiServer
	proxies map[string]*toxiproxy.Proxy
}

func newFaultProxies() *faultProxies {
	// Toxics log through zerolog's global logger, at trace level: off.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	return &faultProxies{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: make(map[string]*toxiproxy.Proxy),
	}
}

// Add starts a proxy named name from a free loopback port to upstream and
// returns its address.
func (f *faultProxies) Add(name, upstream string) (string, error) {
	listen, err := freeAddr()
	if err != nil {
		return "", err
	}
	p := toxiproxy.NewProxy(f.server, name, listen, upstream)
	if err := f.server.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("proxy %s: %w", name, err)
	}
	f.proxies[name] = p
	return p.Listen, nil
}

// Names lists the proxies whose name starts with prefix.
func (f *faultProxies) Names(prefix string) []string {
	var out []string
	for name := range f.proxies {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// toxic is one toxiproxy toxic as its JSON API takes it.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]int `json:"attributes"`
}

// AddToxic puts t on proxy name.
func (f *faultProxies) AddToxic(name string, t toxic) error {
	p, ok := f.proxies[name]
	if !ok {
		return fmt.Errorf("no proxy %s", name)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(string(data))); err != nil {
		return fmt.Errorf("proxy %s: add toxic %s: %w", name, t.Name, err)
	}
	return nil
}

// RemoveToxic takes toxic tname off proxy name.
func (f *faultProxies) RemoveToxic(name, tname string) error {
	p, ok := f.proxies[name]
	if !ok {
		return fmt.Errorf("no proxy %s", name)
	}
	return p.Toxics.RemoveToxic(context.Background(), tname)
}

// Close stops every proxy.
func (f *faultProxies) Close() {
	f.server.Collection.Clear()
}
