package storage

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestSecretBox(t *testing.T) {
	key := func(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
	for _, bad := range []string{"k1", "k1:", ":" + key(1), "k 1:" + key(1), "k1:" + key(1)[:20],
		"k1:" + key(1) + ",k1:" + key(2), "k1:not-base64!"} {
		if _, err := parseSecretBox(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	old, err := parseSecretBox("k1:" + key(1))
	if err != nil {
		t.Fatal(err)
	}
	both, err := parseSecretBox("k2:" + key(2) + ", k1:" + key(1))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"secret":"whsec_abc"}`)
	sealed := old.seal(plain)
	if !bytes.HasPrefix(sealed, []byte("whenc:k1:")) || bytes.Contains(sealed, []byte("whsec_")) {
		t.Fatalf("sealed %q", sealed)
	}
	if bytes.Equal(sealed, old.seal(plain)) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	for name, box := range map[string]*secretBox{"its key": old, "a list holding it": both} {
		if got, err := box.open(sealed); err != nil || !bytes.Equal(got, plain) {
			t.Errorf("open with %s: %q, %v", name, got, err)
		}
	}
	if !bytes.HasPrefix(both.seal(plain), []byte("whenc:k2:")) {
		t.Error("a list does not seal with its first key")
	}
	if got, err := old.open(plain); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("a value stored in clear: %q, %v", got, err)
	}
	var none *secretBox
	if got := none.seal(plain); !bytes.Equal(got, plain) {
		t.Errorf("no key: sealed %q", got)
	}
	if _, err := none.open(sealed); !errors.Is(err, errSealed) {
		t.Errorf("no key: open %v", err)
	}
	other, _ := parseSecretBox("k2:" + key(2))
	if _, err := other.open(sealed); !errors.Is(err, errSealed) {
		t.Errorf("another key: open %v", err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-2] ^= 'A' ^ 'B'
	if _, err := old.open(tampered); err == nil || strings.Contains(err.Error(), "whsec_") {
		t.Errorf("a tampered value: %v", err)
	}
}
