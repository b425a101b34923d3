package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/webhookd/webhookd"
)

// decodeObject decodes a JSON object strictly: every key must be one of
// fields (each a pointer to decode into), and each value must fit its
// destination and hold only text PostgreSQL stores (checkJSONText; the
// items of a *[]json.RawMessage are left to the decodeObject that reads
// each). It returns the keys present. Errors are invalid_json for a body
// that is not UTF-8 JSON and validation_failed naming the field (prefix +
// key) otherwise.
func decodeObject(body []byte, prefix string, fields map[string]any) (map[string]bool, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		field := strings.TrimSuffix(prefix, ".")
		if field == "" {
			field = "body"
		}
		return nil, webhookd.Invalid(field, "must be a JSON object")
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same field every time
	present := make(map[string]bool, len(obj))
	for _, k := range keys {
		dst, ok := fields[k]
		if !ok {
			name := k
			if name == "" {
				name = `""`
			}
			return nil, webhookd.Invalid(prefix+name, "unknown field")
		}
		if _, items := dst.(*[]json.RawMessage); !items {
			if err := checkJSONText(prefix+k, obj[k]); err != nil {
				return nil, err
			}
		}
		if err := json.Unmarshal(obj[k], dst); err != nil {
			return nil, webhookd.Invalid(prefix+k, "must be %s", describe(reflect.TypeOf(dst).Elem()))
		}
		present[k] = true
	}
	return present, nil
}

// describe names a destination type for an error message.
func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return describe(t.Elem()) + " or null"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // json.RawMessage
			return "any JSON value"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describe(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return fmt.Sprintf("a %s", t.Kind())
}

// compactJSON returns v without insignificant white space.
func compactJSON(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}
