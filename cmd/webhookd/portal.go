package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/webhookd/webhookd/api"
)

// The integrators' portal (SPEC §5b) as the command sees it: where its
// links point, which sites may frame it, and `webhookd portal-link`.

const portalLinkUsage = `usage: webhookd portal-link --project NAME [--ttl 1h]`

// portalBaseURL is where portal links point: WEBHOOKD_PORTAL_BASE_URL, or
// the dashboard's own address (a wildcard host read as localhost).
func (c Config) portalBaseURL() string {
	if c.PortalBaseURL != "" {
		return strings.TrimSuffix(c.PortalBaseURL, "/")
	}
	host, port, err := net.SplitHostPort(c.DashboardAddr)
	if err != nil {
		return "http://" + c.DashboardAddr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
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

// runPortalLink prints a one-time link into the portal for a project, as
// POST /v1/portal-sessions makes for the project's API key.
func runPortalLink(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("webhookd portal-link", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := DefaultConfig()
	check := cfg.bind(fs, getenv)
	project := fs.String("project", "", "the project whose portal the link opens (required)")
	ttl := fs.Duration("ttl", api.DefaultPortalLinkTTL, "how long the link may be opened, 1m to 24h")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	switch {
	case *project == "" || fs.NArg() > 0:
		return errors.New("portal-link: --project NAME is required, and nothing else\n" + portalLinkUsage)
	case *ttl < time.Minute || *ttl > api.MaxPortalLinkTTL:
		return errors.New("portal-link: --ttl must be from 1m to 24h\n" + portalLinkUsage)
	}
	m := NewMain(cfg, stderr)
	defer m.Close()
	if err := m.OpenDB(ctx); err != nil {
		return err
	}
	s := m.DB.Store()
	p, err := s.ProjectByName(ctx, *project)
	if err != nil {
		return refused("portal-link", err)
	}
	now := time.Now()
	token, err := s.CreatePortalLink(ctx, p.ID, now, now.Add(*ttl))
	if err != nil {
		return fmt.Errorf("portal-link: %w", err)
	}
	fmt.Fprintln(stdout, cfg.portalBaseURL()+api.PortalLinkPath(token))
	return nil
}
