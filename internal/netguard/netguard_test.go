package netguard

import (
	"errors"
	"net/netip"
	"testing"
)

func TestAllowed(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", false},        // loopback
		{"127.8.9.10", false},       // loopback /8
		{"::1", false},              // loopback
		{"10.0.0.1", false},         // RFC 1918
		{"172.16.5.4", false},       // RFC 1918
		{"172.31.255.255", false},   // RFC 1918
		{"192.168.1.1", false},      // RFC 1918
		{"169.254.169.254", false},  // link-local, cloud metadata
		{"fe80::1", false},          // link-local
		{"fe80::1%eth0", false},     // link-local with a zone
		{"fc00::1", false},          // ULA
		{"fd12:3456::1", false},     // ULA
		{"224.0.0.1", false},        // multicast
		{"ff02::1", false},          // multicast
		{"0.0.0.0", false},          // unspecified
		{"::", false},               // unspecified
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:10.1.2.3", false},  // IPv4-mapped private
		{"100.64.0.1", false},       // CGNAT
		{"198.18.0.1", false},       // benchmarking
		{"255.255.255.255", false},  // broadcast
		{"64:ff9b::7f00:1", false},  // NAT64 of 127.0.0.1
		{"2001:db8::1", false},      // documentation

		{"93.184.216.34", true},
		{"8.8.8.8", true},
		{"172.32.0.1", true}, // just past 172.16.0.0/12
		{"2606:4700::1", true},
		{"::ffff:8.8.8.8", true}, // IPv4-mapped public
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			if got := Allowed(netip.MustParseAddr(tt.ip)); got != tt.want {
				t.Errorf("Allowed(%s) = %v, want %v", tt.ip, got, tt.want)
			}
		})
	}
	if Allowed(netip.Addr{}) {
		t.Error("Allowed(zero Addr) = true, want false")
	}
}

// TestDialControl calls the Control function directly with address strings,
// as net.Dialer would after resolving; nothing is dialled.
func TestDialControl(t *testing.T) {
	tests := []struct {
		name         string
		allowPrivate bool
		address      string
		blocked      string // the BlockedAddressError's Addr; "" when allowed
	}{
		{"private", false, "10.0.0.1:443", "10.0.0.1"},
		{"loopback any port", false, "127.0.0.1:8080", "127.0.0.1"},
		{"metadata", false, "169.254.169.254:80", "169.254.169.254"},
		{"ipv6 loopback", false, "[::1]:443", "::1"},
		{"mapped loopback", false, "[::ffff:127.0.0.1]:80", "::ffff:127.0.0.1"},
		{"unparsable", false, "example.com:80", "example.com:80"},
		{"public, odd port", false, "93.184.216.34:8443", ""},
		{"public ipv6", false, "[2606:4700::1]:443", ""},
		{"private allowed", true, "10.0.0.1:443", ""},
		{"loopback allowed", true, "127.0.0.1:8080", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := DialControl(tt.allowPrivate)("tcp4", tt.address, nil)
			if tt.blocked == "" {
				if err != nil {
					t.Fatalf("control(%s) = %v, want nil", tt.address, err)
				}
				return
			}
			var blocked *BlockedAddressError
			if !errors.As(err, &blocked) || blocked.Addr != tt.blocked {
				t.Fatalf("control(%s) = %v, want BlockedAddressError for %s", tt.address, err, tt.blocked)
			}
			if want := "destination address " + tt.blocked + " is not allowed"; err.Error() != want {
				t.Errorf("message %q, want %q", err.Error(), want)
			}
		})
	}
}
