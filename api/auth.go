package api

import (
	"net/http"
	"strings"
)

// bearerToken returns the credentials of an Authorization: Bearer header.
// The scheme is case-insensitive (RFC 9110 §11.1: bearer, BEARER) and may be
// followed by more than one space; a missing, empty or non-text token
// (not UTF-8, or holding NUL) is no token.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimLeft(r.Header.Get("Authorization"), " \t"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.Trim(token, " \t")
	if token == "" || textProblem(token) != "" {
		return "", false
	}
	return token, true
}
