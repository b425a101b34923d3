package client

import (
	"context"
	"slices"
)

// RelayURL is the URL of the relay endpoint named name: its deliveries go
// to `webhookd listen --endpoint name` (SPEC §3 "Relay endpoints").
func RelayURL(name string) string { return "relay://" + name }

// RelayEndpoint returns the project's endpoint whose URL is relay://name,
// creating it if there is none (created then says so), and makes it
// subscribe to eventTypes (none: every type) and be active: what `webhookd
// listen` does before it opens its stream. Of several such endpoints it
// takes the first the API lists.
func (c *Client) RelayEndpoint(ctx context.Context, name string, eventTypes []string) (ep *Endpoint, created bool, err error) {
	url := RelayURL(name)
	for e, err := range c.Endpoints(ctx, 100) {
		if err != nil {
			return nil, false, err
		}
		if e.URL == url {
			ep = &e
			break
		}
	}
	if ep == nil {
		ep, err = c.CreateEndpoint(ctx, NewEndpoint{URL: url, Description: "webhookd listen", EventTypes: eventTypes})
		return ep, err == nil, err
	}
	var p EndpointPatch
	types := slices.Clone(eventTypes)
	if types == nil {
		types = []string{}
	}
	if !slices.Equal(ep.EventTypes, types) && !(len(ep.EventTypes) == 0 && len(types) == 0) {
		p.EventTypes = &types
	}
	if ep.Status != "active" {
		active := "active"
		p.Status = &active
	}
	if p.EventTypes == nil && p.Status == nil {
		return ep, false, nil
	}
	ep, err = c.UpdateEndpoint(ctx, ep.ID, p)
	return ep, false, err
}
