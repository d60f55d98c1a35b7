package proxy

import (
	"net/http"
	"testing"
)

// TestOriginRequestHeader: what a client sent that reaches the origin (or
// a peer): never cookies, credentials, hop-by-hop fields (also those named
// in Connection), conditionals or ranges; always Via, X-Forwarded-For and
// a User-Agent naming the proxy.
func TestOriginRequestHeader(t *testing.T) {
	in := http.Header{
		"Cookie":              {"a=b"},
		"Cookie2":             {`$Version="1"`},
		"Authorization":       {"Basic eDp5"},
		"Proxy-Authorization": {"Basic eDp5"},
		"Connection":          {"keep-alive, X-Secret"},
		"X-Secret":            {"hop"},
		"Keep-Alive":          {"timeout=5"},
		"Range":               {"bytes=0-1"},
		"If-None-Match":       {`"v1"`},
		"X-Forwarded-For":     {"203.0.113.66"},
		"Accept-Language":     {"fr"},
		"User-Agent":          {"curl/8"},
	}
	out := originRequestHeader(forwardedView(in, defaultForwardFields, ""), "198.51.100.7", proxyVersion)
	for _, k := range []string{"Cookie", "Cookie2", "Authorization", "Proxy-Authorization", "Connection", "X-Secret", "Keep-Alive", "Range", "If-None-Match"} {
		if v := out.Values(k); len(v) != 0 {
			t.Errorf("%s passed: %q", k, v)
		}
	}
	want := map[string]string{
		"Accept-Language": "fr",
		"Via":             "1.1 coral",
		"X-Forwarded-For": "198.51.100.7", // the client's claim is not passed on as fact
		"User-Agent":      "curl/8 " + proxyVersion,
	}
	for k, v := range want {
		if got := out.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if in.Get("Cookie") != "a=b" {
		t.Error("the client's header was modified")
	}
}
