package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// secretPrefix starts every endpoint secret: whsec_ + base64 of the raw key.
const secretPrefix = "whsec_"

// ErrMalformedSecret is wrapped by the errors Sign and SignatureHeader
// return for a secret that is not whsec_ followed by standard base64 of a
// non-empty key. The error never contains the secret.
var ErrMalformedSecret = errors.New("malformed signing secret")

// Sign returns one Standard Webhooks signature entry,
// "v1,<base64 HMAC-SHA256(key, msgID.unixSeconds.body)>", where key is the
// raw key inside secret and unixSeconds is ts in whole Unix seconds (the
// value of the webhook-timestamp header). A malformed secret is an error
// wrapping ErrMalformedSecret.
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := decodeSecret(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID))
	mac.Write([]byte{'.'})
	mac.Write(strconv.AppendInt(nil, ts.Unix(), 10))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// SignatureHeader returns the value of the webhook-signature header: one
// Sign entry per secret, separated by a single space (during a rotation the
// current and the previous secret both sign). It fails when secrets is
// empty or any secret is malformed.
func SignatureHeader(secrets []string, msgID string, ts time.Time, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("no signing secret")
	}
	entries := make([]string, len(secrets))
	for i, secret := range secrets {
		sig, err := Sign(secret, msgID, ts, body)
		if err != nil {
			return "", err
		}
		entries[i] = sig
	}
	return strings.Join(entries, " "), nil
}

func decodeSecret(secret string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: missing %s prefix", ErrMalformedSecret, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedSecret, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: empty key", ErrMalformedSecret)
	}
	return key, nil
}
