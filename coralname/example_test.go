package coralname_test

import (
	"fmt"
	"net/url"

	"github.com/coralcdn/coral/coralname"
)

func ExampleCoralize() {
	o := coralname.Origin{Host: "www.example.com", Port: 8080}
	fmt.Println(coralname.Coralize(o, "NYUD.net."))
	one, err := coralname.CoralizeOneLabel(o, "nyud.net")
	fmt.Println(one, err)
	// Output:
	// www.example.com.8080.nyud.net
	// www-example-com-8080.nyud.net <nil>
}

func ExampleZones_ParseOrigin() {
	zs := coralname.NewZones("nyud.net", "nyucd.net")
	for _, rel := range []string{"www.example.com.8080", "my--site-example-com", "a.nyucd.net", "localhost"} {
		o, err := zs.ParseOrigin(rel)
		fmt.Printf("%+v %v\n", o, err)
	}
	// Output:
	// {Host:www.example.com Port:8080 OneLabel:false} <nil>
	// {Host:my-site.example.com Port:0 OneLabel:true} <nil>
	// {Host: Port:0 OneLabel:false} host "a.nyucd.net": origin host carries the Coral zone
	// {Host: Port:0 OneLabel:false} host "localhost": malformed origin host: single-label origin
}

func ExampleNormalizeURL() {
	// Both name one object: the scheme only says which port is the
	// default, and the path is normalized.
	fmt.Println(coralname.NormalizeURL("http", "WWW.Example.COM.", 80, "/a/./b/../%7euser", "q=1#top"))
	fmt.Println(coralname.NormalizeURL("https", "www.example.com", 443, "/a/~user", "q=1"))
	// Output:
	// //www.example.com/a/~user?q=1
	// //www.example.com/a/~user?q=1
}

func ExampleCacheKey() {
	fmt.Println(coralname.CacheKey("http", "www.example.com", 0, "/a.jpg", ""))
	// Output:
	// 190851e31b5e9772f9296a638429cd574ef9556c
}

func ExampleOriginURL() {
	u := coralname.OriginURL("http", "www.example.com", 8080, "/a/%2e%2e/b c", "x=1")
	fmt.Println(u, u.RequestURI())
	// Output:
	// http://www.example.com:8080/b%20c?x=1 /b%20c?x=1
}

func ExampleCheckDomain() {
	for _, name := range []string{"Example.COM.", "192.0.2.7", "example.123", "bücher.de"} {
		n, ipv4, err := coralname.CheckDomain(name)
		fmt.Println(n, ipv4, err)
	}
	// Output:
	// example.com false <nil>
	// 192.0.2.7 true <nil>
	//  false host "example.123": malformed origin host: numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)
	//  false host "bücher.de": malformed origin host: non-ASCII host (send IDNs as punycode)
}

func ExampleURLPort() {
	for _, raw := range []string{"http://h.com/", "http://h.com:80/", "https://h.com:80/", "http://h.com:080/"} {
		u, _ := url.Parse(raw)
		fmt.Println(coralname.URLPort(u))
	}
	// Output:
	// 0 true
	// 0 true
	// 80 true
	// 0 false
}
