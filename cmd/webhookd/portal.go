package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/webhookd/webhookd/api"
)

// The integrators' portal (SPEC §5b) as the command sees it: where its
// links point, which sites may frame it, and `webhookd portal-link`.

// portalBaseURL is where portal links point: WEBHOOKD_PORTAL_BASE_URL, or
// the dashboard's own address, a wildcard host (":8081", "0.0.0.0", "::")
// read as 127.0.0.1, as the banner and the README write the local address.
func (c Config) portalBaseURL() string {
	if c.PortalBaseURL != "" {
		return strings.TrimSuffix(c.PortalBaseURL, "/")
	}
	host, port, err := net.SplitHostPort(c.DashboardAddr)
	if err != nil {
		return "http://" + c.DashboardAddr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// portalFrameAncestors lists WEBHOOKD_PORTAL_FRAME_ANCESTORS: origins,
// separated by commas or spaces; "none" (or nothing) lists none.
func (c Config) portalFrameAncestors() []string {
	var out []string
	for _, o := range strings.FieldsFunc(c.PortalFrameAncestors, func(r rune) bool { return r == ',' || r == ' ' }) {
		if o != "none" && o != "'none'" {
			out = append(out, strings.TrimSuffix(o, "/")) // an origin, written as a URL
		}
	}
	return out
}

// portalLink prints a one-time link into the portal for a project, as
// POST /v1/portal-sessions makes for the project's API key.
func portalLink(f *flagSet) action {
	var (
		project string
		ttl     time.Duration
	)
	f.String(&project, "project", "", plain, "the project whose portal the link opens (`NAME`; required)")
	f.Duration(&ttl, "ttl", "", "how long the link may be opened, 1m to 24h (`D`; default 15m)")
	return func(ctx context.Context, inv *invocation) error {
		if ttl == 0 {
			ttl = api.DefaultPortalLinkTTL
		}
		switch {
		case project == "":
			return usageError{cmd: "portal-link", err: errors.New("--project NAME is required")}
		case ttl < time.Minute || ttl > api.MaxPortalLinkTTL:
			return usageError{cmd: "portal-link", err: errors.New("--ttl must be from 1m to 24h")}
		}
		m := newMain(inv)
		defer m.Close()
		if err := m.OpenDB(ctx); err != nil {
			return err
		}
		s := m.DB.Store()
		p, err := s.ProjectByName(ctx, project)
		if err != nil {
			return refused(err)
		}
		now := time.Now()
		token, err := s.CreatePortalLink(ctx, p.ID, now, now.Add(ttl))
		if err != nil {
			return err
		}
		fmt.Fprintln(inv.stdout, inv.cfg.portalBaseURL()+api.PortalLinkPath(token))
		return nil
	}
}
