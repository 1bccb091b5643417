package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Fingerprint is the lowercase hex SHA-256 of b (64 characters), the fingerprint
// idem's own tools make of a request's bytes.
func Fingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// FingerprintJSON is the Fingerprint of v's canonical JSON: object members sorted
// by name, no insignificant white space, numbers as written. Two encodings of the
// same value (members in another order, other spacing) have the same fingerprint.
// v is raw JSON ([]byte, json.RawMessage) or any value encoding/json encodes.
func FingerprintJSON(v any) (string, error) {
	var raw []byte
	switch x := v.(type) {
	case []byte:
		raw = x
	case json.RawMessage:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("idem: fingerprint: %w", err)
		}
		raw = b
	}
	canonical, err := CanonicalJSON(raw)
	if err != nil {
		return "", err
	}
	return Fingerprint(canonical), nil
}

// CanonicalJSON re-encodes one JSON value with object members sorted by name and no
// insignificant white space; numbers keep their digits. Errors: not one JSON value.
func CanonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("idem: not JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("idem: not JSON: more than one value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps are written with sorted keys
		return nil, fmt.Errorf("idem: not JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
