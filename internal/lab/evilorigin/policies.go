package evilorigin

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// isEvil reports whether a request asks for the poisoned answer: a
// User-Agent or Accept containing "evil", or either field sent twice.
func isEvil(req *Request) bool {
	for _, name := range []string{"User-Agent", "Accept"} {
		vs := req.Header.Values(name)
		if len(vs) > 1 {
			return true
		}
		for _, v := range vs {
			if strings.Contains(strings.ToLower(v), "evil") {
				return true
			}
		}
	}
	return false
}

// Poison is the body of the poisoned answers of error-on-unkeyed and
// vary-then-error: a client that gets it was served another user's error.
const Poison = "POISONED: this answer was keyed on a field the cache key does not hold\n"

func poison(r *response, status int) {
	r.status = status
	r.add("Content-Type", "text/plain")
	r.body = &bodySource{n: int64(len(Poison)), write: func(w io.Writer) error {
		_, err := io.WriteString(w, Poison)
		return err
	}}
}

func etag(r *response) string {
	return fmt.Sprintf(`"%x"`, Content(r.req.Path+"?"+r.req.Query.Encode(), 8))
}

// Policies: caching fields, validators, redirects and answers that
// depend on request fields.
var Policies = map[string]PolicyFunc{
	"max-age": func(r *response) {
		r.add("Cache-Control", "max-age=3600")
		r.add("ETag", etag(r))
	},
	"no-store": func(r *response) { r.add("Cache-Control", "no-store") },
	// short: fresh for 1 s (s-maxage, which min_ttl does not stretch), a
	// new ETag every second: each second is a new version.
	"short": func(r *response) {
		r.add("Cache-Control", "s-maxage=1")
		r.add("ETag", fmt.Sprintf(`"v%d"`, time.Now().Unix()))
	},
	"304-always": func(r *response) {
		r.status = http.StatusNotModified
		r.add("Cache-Control", "max-age=3600")
		r.body = nil
	},
	// 304-revalidate: 200 with an ETag, fresh for 1 s; a conditional
	// request gets 304 without ETag or Last-Modified, and another
	// Content-Type.
	"304-revalidate": func(r *response) {
		if r.req.Header.Get("If-None-Match") != "" || r.req.Header.Get("If-Modified-Since") != "" {
			r.status = http.StatusNotModified
			r.add("Cache-Control", "max-age=3600")
			r.add("Content-Type", "application/x-evil")
			r.body = nil
			return
		}
		r.add("Cache-Control", "s-maxage=1")
		r.add("ETag", etag(r))
	},
	// vary-explosion: a variant per User-Agent, Accept and Accept-Language,
	// its body marked with the values.
	"vary-explosion": func(r *response) {
		r.add("Cache-Control", "max-age=3600")
		r.add("Vary", "User-Agent, Accept, Accept-Language")
		key := r.req.Header.Get("User-Agent") + "|" + r.req.Header.Get("Accept") + "|" + r.req.Header.Get("Accept-Language")
		n := r.recipe.N
		r.body = &bodySource{n: n, write: func(w io.Writer) error {
			return writeContent(w, r.req.Path+"#"+key, n, 0, nil)
		}}
	},
	"vary-star": func(r *response) {
		r.add("Cache-Control", "max-age=3600")
		r.add("Vary", "*")
	},
	// error-on-unkeyed: a 200 fresh for an hour, or, for an evil request,
	// a status-Status (500 unless the recipe says otherwise) error page
	// fresh for an hour with the Poison body.
	"error-on-unkeyed": func(r *response) {
		r.add("Cache-Control", "max-age=3600")
		if isEvil(r.req) {
			st := r.recipe.Status
			if st < 400 {
				st = http.StatusInternalServerError
			}
			poison(r, st)
		}
	},
	// error-on-unkeyed-short: as error-on-unkeyed, but the 200 is fresh
	// for 2 s only (s-maxage, which min_ttl does not stretch), so caches
	// keep going back — and the first to ask may be evil.
	"error-on-unkeyed-short": func(r *response) {
		if isEvil(r.req) {
			r.add("Cache-Control", "max-age=3600")
			poison(r, http.StatusInternalServerError)
			return
		}
		r.add("Cache-Control", "s-maxage=2")
	},
	// vary-ua-error: Vary: User-Agent, a 200 fresh for 2 s, or, for an
	// evil request (two User-Agent lines among them), a 500 fresh for an
	// hour with the Poison body.
	"vary-ua-error": func(r *response) {
		r.add("Vary", "User-Agent")
		if isEvil(r.req) {
			r.add("Cache-Control", "max-age=3600")
			poison(r, http.StatusInternalServerError)
			return
		}
		r.add("Cache-Control", "s-maxage=2")
	},
	// vary-then-error: 200 with Vary: Accept-Language, or, for an evil
	// request, a 404 without Vary, fresh for an hour, with the Poison body.
	"vary-then-error": func(r *response) {
		r.add("Cache-Control", "max-age=3600")
		if isEvil(r.req) {
			poison(r, http.StatusNotFound)
			return
		}
		r.add("Vary", "Accept-Language")
	},
	"redirect-self": func(r *response) { redirect(r, http.StatusFound, r.req.Target) },
	"redirect-chain": func(r *response) {
		q := r.req.Query
		hop, _ := strconv.Atoi(q.Get("hop"))
		q.Set("hop", strconv.Itoa(hop+1))
		redirect(r, http.StatusFound, r.req.Path+"?"+q.Encode())
	},
	"redirect-https": func(r *response) {
		redirect(r, http.StatusMovedPermanently, "https://"+r.req.Host+r.req.Target)
	},
}

func redirect(r *response, status int, location string) {
	r.status = status
	r.add("Location", location)
	r.add("Cache-Control", "max-age=3600")
	r.body = &bodySource{n: 0, write: func(io.Writer) error { return nil }}
}
