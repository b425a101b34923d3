package main

import "testing"

// TestFreeAddrNeverHandsAPortOutTwice: a soak takes its ports before it
// binds them, so two picks of one free port would give two processes the
// same address. 2,000 picks among the ~22,000 ports under the ephemeral
// range would repeat one about 90 times by chance alone.
func TestFreeAddrNeverHandsAPortOutTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
