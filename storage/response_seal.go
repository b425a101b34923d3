package storage

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"

	"github.com/webhookd/webhookd"
)

// requesterPrefix starts a stored response sealed for its requester:
// "whreq:" + base64url(nonce ‖ AES-256-GCM ciphertext). It is neither a
// JSON body nor a box's sealed value (sealedPrefix), and the box may seal
// it again on top.
const requesterPrefix = "whreq:"

// requesterAEAD is the cipher of the stored response of k: its key is
// derived from the requester's credential (an API key, of 256 random
// bits) and the record's scope. The database keeps only the credential's
// SHA-256, from which the key cannot be derived: a response sealed with
// it is readable only by a repeat that presents the credential, which
// could create a new link or read the endpoint's secret anyway.
func requesterAEAD(k IdempotencyKey) cipher.AEAD {
	key, err := hkdf.Key(sha256.New, []byte(k.Credential), []byte(k.ProjectID+"/"+k.Key), "webhookd stored response", 32)
	if err != nil { // only for a length HKDF-SHA256 cannot give
		panic(err)
	}
	block, _ := aes.NewCipher(key) // 32 bytes: AES-256
	aead, _ := cipher.NewGCM(block)
	return aead
}

// sealForRequester seals the body of a response that carries a secret.
func sealForRequester(k IdempotencyKey, body []byte) []byte {
	aead := requesterAEAD(k)
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	ct := aead.Seal(nonce, nonce, body, nil)
	return base64.RawURLEncoding.AppendEncode([]byte(requesterPrefix), ct)
}

// openForRequester opens a body sealed by sealForRequester for k; any
// other body is returned as it is. A repeat with another credential than
// the request's gets idempotency_key_mismatch.
func openForRequester(k IdempotencyKey, body []byte) ([]byte, error) {
	encoded, ok := bytes.CutPrefix(body, []byte(requesterPrefix))
	if !ok {
		return body, nil
	}
	aead := requesterAEAD(k)
	ct, err := base64.RawURLEncoding.AppendDecode(nil, encoded)
	if err != nil || len(ct) < aead.NonceSize() {
		return nil, errors.New("read idempotency record: a sealed response is malformed")
	}
	plain, err := aead.Open(nil, ct[:aead.NonceSize()], ct[aead.NonceSize():], nil)
	if err != nil {
		return nil, &webhookd.Error{Code: webhookd.CodeIdempotencyKeyMismatch,
			Message: "this Idempotency-Key's response holds a secret and is replayed only to the API key that made the request"}
	}
	return plain, nil
}

// errNoCredential says a response that carries a secret came with no
// credential to seal it for: it is not stored in clear.
var errNoCredential = errors.New("a stored response with a secret needs IdempotencyKey.Credential")
