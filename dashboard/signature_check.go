package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// signatureTolerance is how far webhook-timestamp may be from the time a
// request arrived before Standard Webhooks libraries refuse it.
const signatureTolerance = 5 * time.Minute

// signatureCheck is whether a request a bin received carries a valid
// Standard Webhooks signature of its endpoint, checked as a receiver
// would: HMAC-SHA256 over webhook-id.webhook-timestamp.body with each of
// the endpoint's secrets, compared with every v1 entry of
// webhook-signature.
type signatureCheck struct {
	State      string   // valid, invalid, or unchecked (no signature, or no endpoint to check with)
	Detail     string   // which secret verified it, or why not
	Notes      []string // more to know: a timestamp out of tolerance
	DeliveryID string   // the delivery the attempt belongs to, when known
	Trigger    string
}

// checkSignature finds the endpoint that signed q through the attempt
// logged with its X-Request-Id, and checks the signature with the
// endpoint's current secret and, during a rotation, its previous one.
func (s *Server) checkSignature(ctx context.Context, q storage.InspectorRequest) signatureCheck {
	h := http.Header(q.Headers)
	msgID, ts, sig := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if msgID == "" || ts == "" || sig == "" {
		return signatureCheck{State: "unchecked",
			Detail: "No webhook-id, webhook-timestamp and webhook-signature headers: this is not a signed webhook."}
	}
	reqID := h.Get("X-Request-Id")
	signer, err := s.store.AttemptSignerByRequestID(ctx, reqID)
	if err != nil {
		if webhookd.ErrorCode(err) != webhookd.CodeNotFound {
			s.log.Error("inspector: looking up the signer failed", "request_id", reqID, "err", err)
		}
		return signatureCheck{State: "unchecked", Detail: "No attempt is logged with this X-Request-Id, so the " +
			"inspector cannot tell whose secret to check with. (An attempt is logged once its response is in: reload.)"}
	}
	c := signatureCheck{State: "invalid", DeliveryID: signer.DeliveryID, Trigger: signer.Trigger,
		Detail: "The signature does not verify with any of the endpoint's secrets."}
	secrets := []struct{ label, secret string }{{"the endpoint's current secret", signer.Secret}}
	if signer.PreviousSecret != nil && signer.PreviousExpiresAt != nil {
		secrets = append(secrets, struct{ label, secret string }{
			"the endpoint's previous secret (rotated out; it signs until " + utc(*signer.PreviousExpiresAt) + " UTC)",
			*signer.PreviousSecret})
	}
	var matched []string
	for _, sc := range secrets {
		if signatureMatches(sc.secret, msgID, ts, q.Body, sig) {
			matched = append(matched, sc.label)
		}
	}
	if len(matched) > 0 {
		c.State, c.Detail = "valid", "Verified with "+strings.Join(matched, ", and with ")+"."
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil {
		c.State, c.Detail = "invalid", "webhook-timestamp is not a whole number of Unix seconds."
	} else if off := q.ReceivedAt.Sub(time.Unix(sec, 0)); off > signatureTolerance || off < -signatureTolerance {
		c.Notes = append(c.Notes, fmt.Sprintf("webhook-timestamp is %s off the time it arrived: receivers "+
			"using a Standard Webhooks library refuse more than 5 minutes.", off.Round(time.Second)))
	}
	return c
}

// signatureMatches reports whether any v1 entry of header is the
// signature of msgID.ts.body with secret (whsec_ + base64 of the key).
func signatureMatches(secret, msgID, ts string, body []byte, header string) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(header) {
		version, value, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}
