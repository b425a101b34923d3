// Package netguard decides which addresses webhookd may deliver to (SPEC §6):
// a leaf that both the API (checking endpoint URLs) and the dispatcher
// (checking every dial) use, so the API need not import the dispatcher.
package netguard

import (
	"net/netip"
	"syscall"

	"code.dny.dev/ssrf"
)

// guardian supplies code.dny.dev/ssrf's deny lists: the IANA special-purpose
// IPv4 ranges (CGNAT 100.64.0.0/10, benchmarking 198.18.0.0/15, reserved
// 240.0.0.0/4, ...) and everything outside IPv6 global unicast. Only its
// address check (SafeAddr) is used, so its default port and network limits
// do not apply: webhook endpoints may listen on any port.
var guardian = ssrf.New()

// BlockedAddressError reports a dial refused by the SSRF guard.
type BlockedAddressError struct {
	Addr string // the resolved IP address that was refused
}

func (e *BlockedAddressError) Error() string {
	return "destination address " + e.Addr + " is not allowed"
}

// Allowed reports whether deliveries may connect to ip. It refuses
// loopback, private (RFC 1918, ULA fc00::/7), link-local (169.254.0.0/16,
// fe80::/10), multicast and unspecified addresses, and every other
// special-purpose range code.dny.dev/ssrf denies (CGNAT 100.64.0.0/10,
// documentation, benchmarking, reserved, NAT64, 6to4, ...). An
// IPv4-mapped IPv6 address is judged as the IPv4 address inside it.
func Allowed(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	return guardian.SafeAddr(ip) == nil
}

// DialControl returns a net.Dialer Control function that refuses, with a
// *BlockedAddressError, any connection to an address Allowed rejects. It
// runs on the resolved IP just before connecting, so DNS rebinding cannot
// get around it. With allowPrivate every address passes (local development
// and tests: WEBHOOKD_ALLOW_PRIVATE_NETWORKS).
func DialControl(allowPrivate bool) func(network, address string, c syscall.RawConn) error {
	if allowPrivate {
		return func(string, string, syscall.RawConn) error { return nil }
	}
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &BlockedAddressError{Addr: address}
		}
		if !Allowed(ap.Addr()) {
			return &BlockedAddressError{Addr: ap.Addr().String()}
		}
		return nil
	}
}
