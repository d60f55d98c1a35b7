//go:build linux

package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
)

// Violations of the invariants every response is checked against. A
// failure (an error, a non-200 status, a body the client saw cut short)
// is not a violation: the client knows it did not get the object. A
// violation is a response presented as a complete 200 whose body is not
// the origin's.
const (
	violationTruncated = "truncated body presented as complete"
	violationOtherURL  = "another URL's body"
	violationCorrupt   = "body differs from the origin's"
	violationLength    = "Content-Length differs from the body"
)

// check classifies one response for obj: outcome "ok" or "fail", and the
// violation if any. body and readErr are what reading the whole body
// gave; bySHA maps every object's SHA-256 to its path.
func check(obj *object, resp *http.Response, body []byte, readErr error, bySHA map[[32]byte]string) (ok bool, failure, violation string) {
	if readErr != nil {
		// Go's client reports a body shorter than its Content-Length, or
		// a chunked body without its terminator, as io.ErrUnexpectedEOF:
		// the truncation was visible to the client.
		return false, "body read: " + readErr.Error(), ""
	}
	if resp.StatusCode != http.StatusOK {
		return false, "status " + resp.Status, ""
	}
	if cl := resp.Header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err != nil || n != int64(len(body)) {
			return false, "", violationLength
		}
	}
	sum := sha256.Sum256(body)
	if sum == obj.SHA256 {
		return true, "", ""
	}
	if other, found := bySHA[sum]; found && other != obj.Path {
		return false, "", violationOtherURL
	}
	if len(body) < len(obj.Body) && bytes.Equal(body, obj.Body[:len(body)]) {
		return false, "", violationTruncated
	}
	return false, "", violationCorrupt
}

func describe(obj *object, body []byte) string {
	return fmt.Sprintf("%s: %d bytes, want %d", obj.Path, len(body), len(obj.Body))
}
