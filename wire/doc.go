// Package wire is what a delivery is on the wire: the signed request
// (Standard Webhooks signature, webhookd's headers, the JSON body), the
// HTTP client it goes out with (timeouts, no redirects, no proxies, no
// private addresses unless allowed), and how the answer is read and
// described (its body cut to 8 KiB of storable text, a transport error in
// a few words, Retry-After). Whether and when to send is the dispatcher's.
package wire
